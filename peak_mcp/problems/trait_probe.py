"""Traits from what a problem file's reference does, for a file that declares no TRAITS: its buffer shapes alone
cannot tell a LayerNorm ([rows, cols] -> [rows, cols]) from an activation. One input element is changed and the
reference run again: the outputs that move say the kind. Only the same element: elementwise; the whole line through
it along one axis: normalization (softmax where each line sums to 1, or its log does); the line from it onwards
(or up to it): scan. Anything else (a window, a product) says nothing here, and the shapes' guess stands.

Runs the file's code: only where describe runs it (the confined child, problems/describe.py), at the smoke test's
small sizes, and only when the smoke test's reference was quick (PROBE_MAX_S). Any failure: no traits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from peak_mcp.problems.base import BufferArg, Problem, Reference

PROBE_MAX_S = 2.0  # the smoke test's reference took longer: the probe (one more run) is skipped
_MOVED = 1e-12  # relative to the output's largest magnitude: float64 noise, far below a real change


def probe_traits(problem: Problem, sizes: Mapping[str, int], inputs: dict[str, Any],
                 before: Mapping[str, Reference], seconds: float) -> tuple[str, ...]:
    """The traits the reference's behaviour shows (see the module's doc), or () when it shows none of them, took too
    long at these sizes, or failed."""
    if seconds > PROBE_MAX_S:
        return ()
    try:
        return _probe(problem, sizes, inputs, before)
    except Exception:  # the file's code, at a changed input: any failure leaves the shapes' guess
        return ()


def _probe(problem: Problem, sizes: Mapping[str, int], inputs: dict[str, Any],
           before: Mapping[str, Reference]) -> tuple[str, ...]:
    dtype = problem.dtypes[0]
    buffers = [a for a in problem.arguments(dtype) if isinstance(a, BufferArg)]
    outputs = {a.name: a.shape(sizes) for a in buffers if a.is_output}
    for arg in (a for a in buffers if not a.is_output):
        shape = arg.shape(sizes)
        out = next((name for name, s in outputs.items() if s == shape), None)
        held = inputs.get(arg.name)
        if out is None or held is None or not isinstance(held, np.ndarray) or held.dtype.kind != "f" or \
                min(shape, default=0) < 1 or before[out].indices is not None:
            continue
        at = tuple(d // 2 for d in shape)  # the middle: a scan's suffix and prefix both hold other elements
        changed = {**inputs, arg.name: held.copy()}
        flat = int(np.ravel_multi_index(at, shape))  # inputs are stored flat, row-major
        value = float(held.reshape(-1)[flat])
        changed[arg.name].reshape(-1)[flat] = value + 1.0 + abs(value)  # an O(1) change: moves what reads it
        after = problem.reference(changed, sizes, dtype, 0, float("inf"), np)
        old = np.asarray(before[out].values, dtype=np.float64).reshape(shape)
        new = np.asarray(after[out].values, dtype=np.float64).reshape(shape)
        moved = np.abs(new - old) > _MOVED * max(float(np.nanmax(np.abs(old))), 1e-300)
        return _kind(np.argwhere(moved), at, shape, old)
    return ()


def _kind(moved: np.ndarray, at: tuple[int, ...], shape: tuple[int, ...], out: np.ndarray) -> tuple[str, ...]:
    """The traits the moved outputs' positions show, given the changed input's position `at`."""
    places = {tuple(int(i) for i in p) for p in moved}
    if not places:
        return ()
    if places == {at}:
        return ("elementwise",)
    for axis, length in enumerate(shape):
        if any(p[:axis] + p[axis + 1:] != at[:axis] + at[axis + 1:] for p in places):
            continue  # not all on the line through `at` along this axis
        along = sorted(p[axis] for p in places)
        if along == list(range(length)):
            return ("softmax",) if _sums_to_one(out, axis) else ("normalization",)
        if along in (list(range(at[axis], length)), list(range(at[axis] + 1))):
            return ("scan",)
    return ()


def _sums_to_one(out: np.ndarray, axis: int) -> bool:
    """Each line along `axis` is a distribution (softmax), or the log of one (log-softmax)."""
    with np.errstate(all="ignore"):
        if np.all(out >= 0) and np.allclose(out.sum(axis=axis), 1.0, atol=1e-6):
            return True
        return bool(np.allclose(np.log(np.exp(out).sum(axis=axis)), 0.0, atol=1e-6))
