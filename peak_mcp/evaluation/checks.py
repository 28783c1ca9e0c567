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

from peak_mcp.core.chunks import spans_of
from peak_mcp.core.dtypes import to_float64
from peak_mcp.evaluation.workspace import POISON, Workspace
from peak_mcp.problems.base import Reference, Tolerance

MAX_INDICES = 5
PATTERN_ELEMENTS = 1 << 22  # outputs up to this size get wrong_pattern's shape of the wrong elements


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


def _differ(xp: Any, a: Any, b: Any, itemsize: int) -> tuple[int, list[int]]:
    """How many elements of two flat arrays differ in any byte, and the first few flat indices, chunk by chunk."""
    count, first = 0, []
    for part in spans_of(a.size):
        moved = (_rows(a[part], itemsize) != _rows(b[part], itemsize)).any(axis=1)
        count += int(moved.sum())
        _first_in(xp, moved, part.start, first)
    return count, first


def check_inputs(ws: Workspace, inputs: dict[str, Any]) -> Finding | None:
    xp = ws.xp
    for buf in ws.buffers:
        if buf.arg.is_output:
            continue
        count, first = _differ(xp, ws.body(buf.arg.name).reshape(-1), inputs[buf.arg.name].reshape(-1), buf.itemsize)
        if count:
            shape = buf.arg.shape(ws.sizes)
            return Finding("input_modified",
                           f"input {buf.arg.name} was modified by the kernel ({count} elements, first at "
                           f"{where(first, shape)}); inputs are read-only",
                           buf.arg.name, {"count": count})
    return None


def _first_in(xp: Any, mask: Any, offset: int, found: list[int]) -> None:
    if len(found) < MAX_INDICES:
        found.extend(offset + i for i in _first(xp, mask, MAX_INDICES - len(found)))


def _rows(flat: Any, itemsize: int) -> Any:
    return flat.view(np.uint8).reshape(-1, itemsize)


def check_outputs(ws: Workspace, refs: dict[str, Reference], tol: Tolerance,
                  withhold: str | None = None, poison: int = POISON,
                  passed_before: int = 0) -> tuple[Finding | None, dict[str, Any]]:
    """Unwritten elements, NaN/Inf, then the error against the reference. Returns (finding, error statistics).
    `withhold`: why the output's values must not be quoted (values_withheld): a wrong result then gives where and
    how many, the expected values and bounds, and this reason instead of what the kernel wrote. `poison`: the byte
    the outputs were filled with before the launch. `passed_before`: trials this kernel passed on other inputs (the
    poison read back is then not the cause). Every pass goes over the output in chunks (core.chunks)."""
    xp = ws.xp
    stats: dict[str, Any] = {}
    for buf in ws.outputs:
        shape = buf.arg.shape(ws.sizes)
        stored = ws.body(buf.arg.name).reshape(-1)
        ref = refs[buf.arg.name]
        value = int(np.full(buf.itemsize, poison, np.uint8).view(stored.dtype)[0]) if ref.exact else None
        count, first = 0, []
        for part in spans_of(stored.size):
            unwritten = (_rows(stored[part], buf.itemsize) == poison).all(axis=1)
            if value is not None:  # all-poison bytes are a value there (-1): unwritten only where that is wrong
                unwritten &= ref.values[part] != value
            count += int(unwritten.sum())
            _first_in(xp, unwritten, part.start, first)
        if count:
            at = where(first, shape)
            return Finding("unwritten_output",
                           f"{count} of {stored.size} elements of {buf.arg.name} were never written (they still hold "
                           f"the NaN poison written before the launch); first at {at}"
                           + _accumulation_hint(buf.arg.name, count, stored.size, passed_before),
                           buf.arg.name, {"count": count, "indices": at}), stats
        if ref.exact:
            finding = check_exact(xp, buf.arg.name, buf.arg.dtype, stored, ref.values, shape, withhold)
            if finding:
                return finding, stats
            stats = stats or {"checked_elements": int(stored.size), "total_elements": int(stored.size)}
            continue
        finding = _check_finite(xp, buf.arg.name, buf.arg.dtype, stored, shape, passed_before)
        if finding:
            return finding, stats
        finding, stats = _check_error(xp, buf.arg.name, buf.arg.dtype, stored, shape, ref, tol, withhold)
        if finding:
            return finding, stats
    return None, stats


def _check_finite(xp: Any, name: str, dtype: str, stored: Any, shape: tuple[int, ...],
                  passed_before: int = 0) -> Finding | None:
    count = nan = 0
    first: list[int] = []
    for part in spans_of(stored.size):
        values = to_float64(stored[part], dtype)
        nonfinite = ~xp.isfinite(values)
        count += int(nonfinite.sum())
        nan += int(xp.isnan(values).sum())
        _first_in(xp, nonfinite, part.start, first)
    if not count:
        return None
    at = where(first, shape)
    return Finding("nan_or_inf", f"{count} elements of {name} are NaN or Inf; first at {at}"
                   + _accumulation_hint(name, nan, stored.size, passed_before), name,
                   {"count": count, "indices": at})


def _check_error(xp: Any, name: str, dtype: str, stored: Any, shape: tuple[int, ...], ref: Reference,
                 tol: Tolerance, withhold: str | None) -> tuple[Finding | None, dict[str, Any]]:
    """The relative L2 error and each checked element against its bound, over chunks of the checked elements."""
    err_sq = ref_sq = 0.0
    n_over, worst, worst_ratio = 0, 0, -1.0
    over_first: list[int] = []  # positions among the checked elements
    masks = []  # the whole `over` mask, kept only where wrong_pattern reads it (small, fully checked outputs)
    small = ref.indices is None and ref.values.size <= PATTERN_ELEMENTS
    for part in spans_of(ref.values.size):
        got = to_float64(stored[part] if ref.indices is None else stored[ref.indices[part]], dtype)
        expected = ref.values[part]
        err = xp.abs(got - expected)
        err_sq += float(xp.sum(err * err))
        if ref.norm is None:
            ref_sq += float(xp.sum(expected * expected))
        ratio = err / (tol.elementwise * ref.scale[part] + 1e-300)
        if ratio.size:
            at = int(xp.argmax(ratio))
            if float(ratio[at]) > worst_ratio:
                worst, worst_ratio = part.start + at, float(ratio[at])
        over = ratio > 1.0
        n_over += int(over.sum())
        _first_in(xp, over, part.start, over_first)
        if small:
            masks.append(over)
    ref_norm = ref.norm if ref.norm is not None else math.sqrt(ref_sq) or 1.0
    rel_l2 = math.sqrt(err_sq) / ref_norm
    rel_bound = ref.rel_l2 if ref.rel_l2 is not None else tol.rel_l2
    stats = {"rel_l2_error": float(f"{rel_l2:.3g}"), "max_error_over_bound": float(f"{max(worst_ratio, 0.0):.3g}"),
             "checked_elements": int(ref.values.size), "total_elements": int(stored.size)}
    if rel_l2 <= rel_bound and not n_over:
        return None, stats
    pattern = wrong_pattern(xp.concatenate(masks).reshape(shape)) if n_over and small else None
    picks = over_first if n_over else [worst]
    flat = picks if ref.indices is None else [int(i) for i in ref.indices[xp.asarray(picks)].tolist()]
    samples = [{"at": at, "got": float(_num(float(to_float64(stored[i:i + 1], dtype)[0]))),
                "expected": float(_num(float(ref.values[j]))),
                "bound": float(_num(tol.elementwise * float(ref.scale[j])))}
               for at, i, j in zip(where(flat, shape), flat, picks, strict=True)]
    if withhold:
        samples = [{k: v for k, v in sample.items() if k != "got"} for sample in samples]
    return Finding("wrong_result",
                   f"{name} differs from the "
                   f"{'reference kernel' if tol.against_kernel else 'float64 reference'}: relative L2 error "
                   f"{rel_l2:.2e} "
                   f"(tolerance {rel_bound:.2g}); {n_over} elements over their bound "
                   f"({tol.describe()}); first: {samples[:3]}" + (f"; {pattern}" if pattern else "")
                   + (f". The values the kernel wrote are withheld: {withhold}" if withhold else ""),
                   name, {"count": n_over, "samples": samples[:3], **stats,
                          **({"pattern": pattern} if pattern else {}),
                          **({"values_withheld": withhold} if withhold else {})}), stats


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
    if mask.ndim == 0 or mask.size > PATTERN_ELEMENTS or not mask.any() or mask.all():
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


def _accumulation_hint(name: str, nan: int, size: int, passed_before: int = 0) -> str:
    """A kernel that adds into its output (C[i] += acc) reads the NaN poison back everywhere: say that outputs
    start as NaN, not zero. Only when every element is NaN (a partial NaN has another cause), and only before the
    kernel passed a trial: the poison is the same on every trial, so one that passed did not read it back (an exp
    overflowing on the stress trial after two passed was sent to look for o[i] += ...)."""
    if nan < size or size == 0 or passed_before:
        return ""
    return (f". Every element is NaN: if the kernel adds into {name} ({name}[i] += ...), note that outputs start as "
            f"NaN, not zero (the validator fills them with NaN before each launch, to catch elements never "
            f"written); store the finished sum ({name}[i] = acc) instead")


def check_same(ws: Workspace, first: dict[str, Any], withhold: str | None = None) -> Finding | None:
    """The outputs equal `first` (bodies from an earlier launch on the same inputs) bit for bit. `withhold`: as for
    check_outputs (the difference between the two launches is not quoted)."""
    xp = ws.xp
    for buf in ws.outputs:
        again, before = ws.body(buf.arg.name).reshape(-1), first[buf.arg.name].reshape(-1)
        count, at = _differ(xp, again, before, buf.itemsize)
        if count:
            drift = 0.0
            for part in spans_of(again.size):
                a, b = to_float64(before[part], buf.arg.dtype), to_float64(again[part], buf.arg.dtype)
                if not bool(xp.isfinite(b).all()):
                    drift = math.inf
                    break
                with np.errstate(invalid="ignore"):
                    drift = max(drift, float(xp.nanmax(xp.abs(a - b))))
            shape = buf.arg.shape(ws.sizes)
            return Finding("nondeterministic",
                           f"two launches on the same inputs gave different {buf.arg.name} ({count} elements differ, "
                           + ("" if withhold else f"max difference {drift:.3g}, ")
                           + f"first at {where(at, shape)}): a race, a missing barrier, or a read of "
                           "memory nothing wrote"
                           + (f". The values the kernel wrote are withheld: {withhold}" if withhold else ""),
                           buf.arg.name, {"count": count})
    return None


def overflow_hint(dtype: str, stress: str, passed: int) -> str:
    """What NaN or Inf on the stress trial means after `passed` trials with the usual inputs passed: the same
    kernel, with larger values, overflowed. Said in place of the accumulation hint, which those trials rule out."""
    return (f". {passed} trial{'s' if passed != 1 else ''} with the usual inputs passed, so this is an overflow on "
            f"large values ({stress}), not an output read before it was written: e.g. an exp without the row's "
            f"maximum subtracted first, or a sum of squares or a product past {dtype}'s range; subtract the max "
            "before exp, scale before squaring, or accumulate in float32")

