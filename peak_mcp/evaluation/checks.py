"""The checks on one launch's results, in the array module of the workspace (numpy, or cupy on the GPU).

Each returns None when it passes or a `Finding` naming the fault with numbers and (row, col) indices the agent
can act on. The order is the order of blame: memory outside the buffers first, then inputs, then outputs.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from peak_mcp.core.dtypes import to_float64
from peak_mcp.evaluation.workspace import POISON, Workspace
from peak_mcp.problems.base import Reference, Tolerance

MAX_INDICES = 5


@dataclass
class Finding:
    check: str
    message: str
    buffer: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def as_verdict(self) -> dict[str, Any]:
        return {"passed": False, "check": self.check, "message": self.message, "buffer": self.buffer,
                **self.details}


def where(flat: list[int], shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Flat indices as (row, col, ...) positions, which is how an agent reads them."""
    return [tuple(int(x) for x in np.unravel_index(i, shape)) for i in flat]


def _first(xp: Any, mask: Any, count: int = MAX_INDICES) -> list[int]:
    return [int(i) for i in xp.flatnonzero(mask)[:count].tolist()]


def _num(x: float) -> str:
    return f"{x:.4g}"


def check_guards(ws: Workspace) -> Finding | None:
    damage = ws.guard_damage()
    if damage is None:
        return None
    where = "before the start" if damage.side == "before" else "past the end"
    return Finding("out_of_bounds_write",
                   f"{damage.count} bytes {where} of buffer {damage.buffer} were overwritten (byte offsets "
                   f"{damage.offsets} relative to its first element): the kernel writes outside the buffer; check "
                   "every index against the sizes, and negative or unsigned-wrapped offsets",
                   damage.buffer, {"side": damage.side, "offsets": damage.offsets})


def check_inputs(ws: Workspace, inputs: dict[str, Any]) -> Finding | None:
    xp = ws.xp
    for buf in ws.buffers:
        if buf.arg.is_output:
            continue
        body, original = ws.body(buf.arg.name), inputs[buf.arg.name].reshape(-1)
        changed = body.view(np.uint8).reshape(-1, buf.itemsize) != original.view(np.uint8).reshape(-1, buf.itemsize)
        changed = changed.any(axis=1)
        count = int(changed.sum())
        if count:
            shape = buf.arg.shape(ws.sizes)
            return Finding("input_modified",
                           f"input {buf.arg.name} was modified by the kernel ({count} elements, first at "
                           f"{where(_first(xp, changed), shape)}); inputs are read-only",
                           buf.arg.name, {"count": count})
    return None


def check_outputs(ws: Workspace, refs: dict[str, Reference], tol: Tolerance,
                  withhold: str | None = None, poison: int = POISON) -> tuple[Finding | None, dict[str, Any]]:
    """Unwritten elements, NaN/Inf, then the error against the reference. Returns (finding, error statistics).
    `withhold`: why the output's values must not be quoted (values_withheld): a wrong result then gives where and
    how many, the expected values and bounds, and this reason instead of what the kernel wrote. `poison`: the byte
    the outputs were filled with before the launch."""
    xp = ws.xp
    stats: dict[str, Any] = {}
    for buf in ws.outputs:
        shape = buf.arg.shape(ws.sizes)
        stored = ws.body(buf.arg.name)
        unwritten = (stored.view(np.uint8).reshape(-1, buf.itemsize) == poison).all(axis=1)
        if refs[buf.arg.name].exact:  # all-poison bytes are a value there (-1): unwritten only where that is wrong
            value = int(np.full(buf.itemsize, poison, np.uint8).view(stored.dtype)[0])
            unwritten &= refs[buf.arg.name].values != value
        count = int(unwritten.sum())
        if count:
            at = where(_first(xp, unwritten), shape)
            return Finding("unwritten_output",
                           f"{count} of {stored.size} elements of {buf.arg.name} were never written (they still hold "
                           f"the NaN poison written before the launch); first at {at}"
                           + _accumulation_hint(buf.arg.name, count, stored.size),
                           buf.arg.name, {"count": count, "indices": at}), stats
        if refs[buf.arg.name].exact:
            finding = check_exact(xp, buf.arg.name, buf.arg.dtype, stored, refs[buf.arg.name].values, shape,
                                  withhold)
            if finding:
                return finding, stats
            stats = stats or {"checked_elements": int(stored.size), "total_elements": int(stored.size)}
            continue
        values = to_float64(stored, buf.arg.dtype)
        nonfinite = ~xp.isfinite(values)
        count = int(nonfinite.sum())
        if count:
            at = where(_first(xp, nonfinite), shape)
            return Finding("nan_or_inf", f"{count} elements of {buf.arg.name} are NaN or Inf; first at {at}"
                           + _accumulation_hint(buf.arg.name, int(xp.isnan(values).sum()), values.size),
                           buf.arg.name, {"count": count, "indices": at}), stats
        ref = refs[buf.arg.name]
        got = values if ref.indices is None else values[ref.indices]
        err = xp.abs(got - ref.values)
        ref_norm = ref.norm if ref.norm is not None else float(xp.linalg.norm(ref.values)) or 1.0
        rel_l2 = float(xp.linalg.norm(err)) / ref_norm
        rel_bound = ref.rel_l2 if ref.rel_l2 is not None else tol.rel_l2
        ratio = err / (tol.elementwise * ref.scale + 1e-300)
        worst = int(xp.argmax(ratio))
        over = ratio > 1.0
        n_over = int(over.sum())
        stats = {"rel_l2_error": float(f"{rel_l2:.3g}"), "max_error_over_bound": float(f"{float(ratio[worst]):.3g}"),
                 "checked_elements": int(ref.values.size), "total_elements": int(values.size)}
        if rel_l2 > rel_bound or n_over:
            pattern = wrong_pattern(over.reshape(shape)) if n_over and ref.indices is None else None
            picks = _first(xp, over) if n_over else [worst]
            flat = picks if ref.indices is None else [int(i) for i in ref.indices[xp.asarray(picks)].tolist()]
            samples = [{"at": at, "got": float(_num(float(got[j]))), "expected": float(_num(float(ref.values[j]))),
                        "bound": float(_num(tol.elementwise * float(ref.scale[j])))}
                       for at, j in zip(where(flat, shape), picks, strict=True)]
            if withhold:
                samples = [{k: v for k, v in sample.items() if k != "got"} for sample in samples]
            return Finding("wrong_result",
                           f"{buf.arg.name} differs from the "
                           f"{'reference kernel' if tol.against_kernel else 'float64 reference'}: relative L2 error "
                           f"{rel_l2:.2e} "
                           f"(tolerance {rel_bound:.2g}); {n_over} elements over their bound "
                           f"({tol.describe()}); first: {samples[:3]}" + (f"; {pattern}" if pattern else "")
                           + (f". The values the kernel wrote are withheld: {withhold}" if withhold else ""),
                           buf.arg.name, {"count": n_over, "samples": samples[:3], **stats,
                                          **({"pattern": pattern} if pattern else {}),
                                          **({"values_withheld": withhold} if withhold else {})}), stats
    return None, stats


def check_exact(xp: Any, name: str, dtype: str, stored: Any, expected: Any, shape: tuple[int, ...],
                withhold: str | None) -> Finding | None:
    """An integer or bool output: every element equal to the reference (float64 holding whole numbers). Where
    several answers are equally right (an argmax over equal values), the reference's is the one asked for."""
    got = stored.astype(np.int64)
    differ = got != expected.astype(np.int64)
    count = int(differ.sum())
    if not count:
        return None
    picks = _first(xp, differ)
    samples = [{"at": at, "got": int(got[j]), "expected": int(expected[j])}
               for at, j in zip(where(picks, shape), picks, strict=True)]
    if withhold:
        samples = [{k: v for k, v in sample.items() if k != "got"} for sample in samples]
    pattern = wrong_pattern(differ.reshape(shape))
    first = samples[0]
    said = f"first at {first['at']}: " + (f"got {first['got']}, " if "got" in first else "") + \
        f"expected {first['expected']}"
    return Finding("wrong_result",
                   f"{name} ({dtype}) differs from the reference in {count} of {stored.size} elements; {dtype} "
                   f"outputs are compared exactly (where equal inputs allow several answers, the reference's rule "
                   f"picks one: an argmax's first maximal index); {said}; first: {samples[:3]}"
                   + (f"; {pattern}" if pattern else "")
                   + (f". The values the kernel wrote are withheld: {withhold}" if withhold else ""),
                   name, {"count": count, "samples": samples[:3], "exact": True,
                          **({"pattern": pattern} if pattern else {}),
                          **({"values_withheld": withhold} if withhold else {})})


def _spans(indices: list[int]) -> str:
    """0, 1, 2, 5 -> '0..2, 5' (at most four runs, then how many more)."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = ", ".join(f"{a}..{b}" if b > a else f"{a}" for a, b in runs[:4])
    return text + (f" and {len(runs) - 4} more runs" if len(runs) > 4 else "")


def wrong_pattern(mask: Any) -> str | None:
    """Where the wrong elements of a fully checked output lie, when that is a shape the agent can act on: the
    indices of a dimension that hold them all (a causal mask ignored leaves only the last query row right), or
    the border of one or two dimensions with a right interior (padding read as the edge pixel). A conv2d kernel
    that clamped its padding got "512 elements over their bound; first: (0, 0, 0, 0) ..." and nothing that said
    border. None when the wrong elements have no such shape."""
    mask = np.asarray(mask.get() if hasattr(mask, "get") else mask, dtype=bool)
    if mask.ndim == 0 or mask.size > 1 << 22 or not mask.any() or mask.all():
        return None
    parts = []
    for axis, n in enumerate(mask.shape):
        held = np.flatnonzero(mask.any(axis=tuple(a for a in range(mask.ndim) if a != axis))).tolist()
        if n > 1 and len(held) < n:
            parts.append(f"along dimension {axis} only at {'index' if len(held) == 1 else 'indices'} "
                         f"{_spans(held)} (of 0..{n - 1})")
    # Depth of each element in the border of a set of dimensions: its distance to the nearest first or last index.
    wide = [a for a, n in enumerate(mask.shape) if n >= 5]
    for size in (1, 2):
        for axes in itertools.combinations(wide, size):
            depth = functools.reduce(np.minimum, (np.minimum(np.arange(mask.shape[a]), np.arange(mask.shape[a])[::-1])
                                                  .reshape([-1 if b == a else 1 for b in range(mask.ndim)])
                                                  for a in axes))
            depth = np.broadcast_to(depth, mask.shape)
            reach = int(depth[mask].max()) + 1
            if reach <= 2 and (depth >= reach).any() and not mask[depth >= reach].any():
                dims = " and ".join(str(a) for a in axes)
                parts.append(f"all lie within {reach} of the edges of dimension{'s' if size > 1 else ''} {dims} "
                             "and the interior is right: look at the boundary (padding, halos, guards)")
                return "wrong elements: " + "; ".join(parts)
    return "wrong elements: " + "; ".join(parts) if parts else None


def _accumulation_hint(name: str, nan: int, size: int) -> str:
    """A kernel that adds into its output (C[i] += acc) reads the NaN poison back everywhere: say that outputs
    start as NaN, not zero. Only when every element is NaN: a partial NaN has another cause."""
    if nan < size or size == 0:
        return ""
    return (f". Every element is NaN: if the kernel adds into {name} ({name}[i] += ...), note that outputs start as "
            f"NaN, not zero (the validator fills them with NaN before each launch, to catch elements never "
            f"written); store the finished sum ({name}[i] = acc) instead")


def check_same(ws: Workspace, first: dict[str, Any], withhold: str | None = None) -> Finding | None:
    """The outputs equal `first` (bodies from an earlier launch on the same inputs) bit for bit. `withhold`: as for
    check_outputs (the difference between the two launches is not quoted)."""
    xp = ws.xp
    for buf in ws.outputs:
        again = ws.body(buf.arg.name)
        moved = again.view(np.uint8).reshape(-1, buf.itemsize) != first[buf.arg.name].view(np.uint8).reshape(
            -1, buf.itemsize)
        moved = moved.any(axis=1)
        count = int(moved.sum())
        if count:
            a, b = to_float64(first[buf.arg.name], buf.arg.dtype), to_float64(again, buf.arg.dtype)
            with np.errstate(invalid="ignore"):
                drift = float(xp.nanmax(xp.abs(a - b))) if bool(xp.isfinite(b).all()) else math.inf
            shape = buf.arg.shape(ws.sizes)
            return Finding("nondeterministic",
                           f"two launches on the same inputs gave different {buf.arg.name} ({count} elements differ, "
                           + ("" if withhold else f"max difference {drift:.3g}, ")
                           + f"first at {where(_first(xp, moved), shape)}): a race, a missing barrier, or a read of "
                           "memory nothing wrote"
                           + (f". The values the kernel wrote are withheld: {withhold}" if withhold else ""),
                           buf.arg.name, {"count": count})
    return None
