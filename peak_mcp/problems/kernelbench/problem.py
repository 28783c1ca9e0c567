"""The translation's result: a KernelBench file as a problem file's declaration (data) plus its callables."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class KernelBenchProblem:
    """A translated KernelBench file.

    `declaration` holds the upper-case names of docs/problems.md (NAME, TITLE, SIZES, DTYPES, INPUTS, OUTPUTS,
    SCALARS, FLOPS, BYTES, CONSTRAINTS, RANGE, TOLERANCE, NAIVE), as plain data: shapes and FLOPS are expression
    strings over the symbols. NAIVE is empty: a KernelBench file has no naive kernel.

    `reference(*inputs, **sizes)`: float64 numpy inputs in INPUTS order, sizes by symbol; returns one float64 numpy
    array per output (a tuple when there are several). `generate(name, shape, rng)`: float64 numpy values for input
    `name`. `torch_reference(*tensors, **sizes)`: the model at the tensors' dtype and device; None without torch."""

    declaration: dict[str, Any]
    reference: Callable[..., Any]
    generate: Callable[[str, tuple[int, ...], np.random.Generator], np.ndarray]
    torch_reference: Callable[..., Any] | None
    symbols: dict[str, str]  # ABI symbol -> module variable
    constants: dict[str, int]  # module ints held at their values
    parameters: dict[str, str]  # ABI input name -> model parameter path
    fixed_arguments: dict[int, Any]  # forward position -> the non-tensor value get_inputs gives there
    distributions: dict[str, str]  # input name -> how `generate` draws it
    notes: tuple[str, ...] = ()
    reference_device: str | None = None  # None: cuda where torch sees one when `reference` runs, else cpu

    def namespace(self) -> dict[str, Any]:
        """The problem as the attributes of a problem file: the declaration plus its callables."""
        out: dict[str, Any] = {**self.declaration, "reference": self.reference, "generate": self.generate}
        if self.torch_reference is not None:
            out["torch_reference"] = self.torch_reference
        return out
