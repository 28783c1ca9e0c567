"""The user's own kernel as the reference, for a problem file without a Python reference.

A session of such a problem starts from `start_session(reference_kernel=SOURCE)`; that kernel is version 0 and
every job of the session carries it (`ReferenceKernel`). In the worker, `KernelReferenced` runs it beside the
candidate on the very inputs the candidate gets, at every size checked, and its output is the reference. The bound
of element i is

    factor * (spread_i + floor * (u_out * m_i + u_f32 * s_i))

as for a Python reference (docs/problems.md, Tolerance), with what a kernel can say about its own error in place of
float64 arithmetic: `spread` is how far two launches of the reference on the same inputs differ (atomics, an
unordered reduction), m = max(|ref|, rms(ref)), and s = sqrt(L) * max(m, how far the reference's output moves
when every input element moves by one unit in the last place, per unit roundoff of the input's type): the output's
sensitivity to rounding (a sum that cancels has a large one), grown by the square root of L, the length of the
longest reduction behind an output element (DeclaredProblem.reduction_length), as
the rounding error of a sum in another order grows. The reference kernel is checked as any kernel is (guards,
inputs left unchanged, every output written and finite); where it fails, nothing can be judged against it, and
the error says so rather than blaming a candidate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from peak_mcp.backends.base import Compiled, Executor
from peak_mcp.core.dtypes import STORAGE, to_float64
from peak_mcp.core.errors import PeakError
from peak_mcp.core.expressions import evaluate
from peak_mcp.core.launch import LaunchSpec
from peak_mcp.problems.base import Reference, Sizes, Tolerance
from peak_mcp.problems.declaration import UNIT_ROUNDOFF, ProblemDeclaration
from peak_mcp.problems.declared import DeclaredProblem
from peak_mcp.problems.file_calls import magnitude_of

UNSIGNED = {2: np.uint16, 4: np.uint32}


class ReferenceKernel(BaseModel):
    """What a job carries of the session's reference kernel: its source and launch (default configuration)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str
    spec: LaunchSpec
    version: int = 0


class ReferenceKernelFailed(PeakError):
    """The reference kernel fails its own checks at some sizes: candidates cannot be judged there."""

    kind = "reference_kernel"


class KernelReferenced(DeclaredProblem):
    """A declared problem whose outputs come from the session's reference kernel, run by `executor`."""

    independent_reference = False  # no float64 arithmetic to spot-check the device against

    def __init__(self, declaration: ProblemDeclaration, executor: Executor, reference: ReferenceKernel,
                 compile_kernel: Callable[[str, LaunchSpec], Compiled]) -> None:
        super().__init__(declaration)
        self.executor, self.kernel_source = executor, reference
        self._compile = compile_kernel
        self._compiled: Compiled | None = None

    def reference_label(self, computed_on: str) -> str:
        return f"the reference kernel (v{self.kernel_source.version}) on {computed_on}"

    def label(self) -> str:
        return f"the reference kernel (v{self.kernel_source.version})"

    def tolerance(self, dtype: str, sizes: Sizes | None = None) -> Tolerance:
        return replace(super().tolerance(dtype, sizes), against_kernel=True,
                       reduction=self.reduction_words(sizes) if sizes else None)

    def reduction_length(self, sizes: Sizes) -> int:
        """L of the bound. A Python reference's |lp - ref| term already holds its own sum's rounding in float32; a
        kernel reference has none, so L must reach the longest sum behind an output element: REDUCTION where
        declared, else the estimate (input over output elements), which for a scan (a cumsum: as many inputs as
        outputs, yet its last element sums a whole row) is raised to the longest output axis, the most a prefix
        along one axis can sum."""
        estimate = super().reduction_length(sizes)
        if self.declaration.reduction is None and "scan" in self.traits:
            return max(estimate, self._longest_axis(sizes))
        return estimate

    def _longest_axis(self, sizes: Sizes) -> int:
        return max((evaluate(e, sizes) for buf in self.declaration.outputs for e in buf.shape), default=1)

    def reduction_words(self, sizes: Sizes) -> str:
        """L at these sizes and where it came from; how to declare it where it was estimated."""
        length = self.reduction_length(sizes)
        if self.declaration.reduction is not None:
            return f"here {length} (the problem's REDUCTION = {self.declaration.reduction})"
        if "scan" in self.traits:
            return (f"here {length}, the longest output axis (a scan that declares no REDUCTION; declare "
                    "REDUCTION = \"<expression of the sizes>\" in the problem file if its prefixes are longer)")
        return (f"here {length}, estimated as input elements per output element, since the problem file declares no "
                "REDUCTION: if each output element sums more terms than that in the reference kernel (a scan, a "
                "running or windowed sum), declare REDUCTION = \"<the longest sum's length, an expression of the "
                "sizes>\" (or TRAITS = [\"scan\"] for a prefix along an axis) in the problem file and define it "
                "again (docs/problems.md, Tolerance)")

    def _kernel(self) -> Compiled:
        if self._compiled is None:
            self._compiled = self._compile(self.kernel_source.source, self.kernel_source.spec)
        return self._compiled

    def references(self, inputs: Mapping[str, Any], sizes: Sizes, dtype: str, xp: Any) -> dict[str, Reference]:
        from peak_mcp.backends.tensor_maps import launch_geometry
        from peak_mcp.evaluation.checks import (  # checks imports workspace, which imports problems
            check_guards,
            check_inputs,
        )
        from peak_mcp.evaluation.workspace import Workspace

        kernel = self._kernel()
        geometry = launch_geometry(kernel.spec, self, dtype, sizes)
        why = self.executor.check_geometry(kernel, geometry)
        if why:
            raise ReferenceKernelFailed(f"{self.label()} cannot launch at {_label(sizes)}: {why}")
        ws = Workspace(self.executor, self, dtype, sizes, xp)

        def launch(given: Mapping[str, Any]) -> dict[str, Any]:
            ws.load(dict(given))
            self.executor.run(kernel, ws.handles, ws.scalars, geometry)
            finding = check_guards(ws) or check_inputs(ws, dict(given))
            if finding:
                raise ReferenceKernelFailed(f"{self.label()} fails its own check at {_label(sizes)}: "
                                            f"{finding.message}")
            outputs = {}
            for buf in ws.outputs:
                values = to_float64(ws.body(buf.arg.name), buf.arg.dtype)
                bad = int((~xp.isfinite(values)).sum())
                if bad:
                    raise ReferenceKernelFailed(f"{self.label()} leaves {bad} elements of {buf.arg.name} unwritten, "
                                                f"NaN or infinite at {_label(sizes)}: candidates cannot be judged "
                                                "there")
                outputs[buf.arg.name] = values
            return outputs

        try:
            first, again = launch(inputs), launch(inputs)
            nudged = {name: _one_ulp(value, xp, seed=sum(sizes.values())) for name, value in inputs.items()}
            moved = launch(nudged)
        finally:
            ws.close()
        tol = self.tolerance(dtype)
        in_roundoff = max((UNIT_ROUNDOFF[b.dtype or dtype] for b in self.declaration.inputs), default=1.0)
        refs = {}
        for buf in self.declaration.outputs:
            ref = first[buf.name]
            magnitude = magnitude_of(ref, xp)
            sensitivity = math.sqrt(self.reduction_length(sizes)) * \
                xp.maximum(magnitude, xp.abs(moved[buf.name] - ref) / (2 * in_roundoff))
            refs[buf.name] = self.bounded(ref, magnitude, sensitivity, xp.abs(again[buf.name] - ref),
                                          buf.dtype or dtype, tol, xp)
        return refs

    def reference_at(self, inputs: Mapping[str, Any], sizes: Sizes, dtype: str, indices: np.ndarray,
                     to_host: Any) -> tuple[np.ndarray, np.ndarray]:
        raise PeakError("a kernel reference has no host recomputation (independent_reference is False)")


def _one_ulp(stored: Any, xp: Any, seed: int) -> Any:
    """Every element of a float array (storage dtype; bf16 as uint16 bits) moved by one unit in the last place,
    up or down at random: +-1 on the bit pattern (sign and magnitude), a zero only away from zero."""
    if stored.dtype not in (STORAGE["f32"], STORAGE["f16"], STORAGE["bf16"]):
        return stored
    unsigned = UNSIGNED[stored.dtype.itemsize]
    bits = stored.reshape(-1).view(unsigned)
    magnitude = bits & unsigned((1 << (8 * stored.dtype.itemsize - 1)) - 1)
    down = xp.asarray(np.random.default_rng(seed).integers(0, 2, bits.size).astype(bool)) & (magnitude != 0)
    moved = xp.where(down, bits - unsigned(1), bits + unsigned(1)).astype(unsigned)
    return moved.view(stored.dtype).reshape(stored.shape)


def _label(sizes: Sizes) -> str:
    return " ".join(f"{k}={v}" for k, v in sizes.items())
