"""Validation and timing, the same for every backend: runs inside a worker, over an `Executor`.

Validation: fresh random inputs per trial, output poisoned (NaN bytes) before each launch, guard bytes after every
buffer, inputs must come back unchanged, two launches on the same inputs must agree, NaN/Inf fail, error against a
float64 host reference. Timing: warm-up, then repetitions each from a cold last-level cache, device timers, median /
min / spread; the output is re-checked after the timed loop.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from peak_mcp.backends.base import Compiled, Executor
from peak_mcp.dtypes import STORAGE, itemsize, to_float64
from peak_mcp.problems.base import BufferArg, Problem, ScalarArg

GUARD_BYTES = 4096
CANARY = 0xA5
POISON = 0xFF  # all-ones bytes are NaN in f32, f16 and bf16
REFERENCE_MAX_FLOPS = 2e11  # above this the problem may check a sample of the output
Progress = Callable[[str], None]


@dataclass
class _Buffer:
    arg: BufferArg
    handle: Any
    nbytes: int


class Workspace:
    """Device buffers for one problem instance, each followed by a guard region."""

    def __init__(self, executor: Executor, problem: Problem, dtype: str, sizes: dict[str, int]) -> None:
        self.executor, self.problem, self.sizes = executor, problem, sizes
        args = problem.arguments(dtype)
        self.buffers = [
            _Buffer(a, None, a.count(sizes) * itemsize(a.dtype)) for a in args if isinstance(a, BufferArg)
        ]
        self.scalars = [a.value(sizes) for a in args if isinstance(a, ScalarArg)]
        for buf in self.buffers:
            buf.handle = executor.alloc(buf.nbytes + GUARD_BYTES)

    def close(self) -> None:
        for buf in self.buffers:
            self.executor.free(buf.handle)

    @property
    def handles(self) -> list[Any]:
        return [b.handle for b in self.buffers]

    def load(self, inputs: dict[str, np.ndarray]) -> None:
        guard = np.full(GUARD_BYTES, CANARY, np.uint8)
        for buf in self.buffers:
            body = (np.full(buf.nbytes, POISON, np.uint8) if buf.arg.is_output
                    else np.ascontiguousarray(inputs[buf.arg.name]).view(np.uint8))
            self.executor.write(buf.handle, np.concatenate([body, guard]))

    def poison_outputs(self) -> None:
        for buf in self.buffers:
            if buf.arg.is_output:
                self.executor.write(buf.handle, np.full(buf.nbytes, POISON, np.uint8))

    def read_all(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """name -> (body bytes, guard bytes)."""
        out = {}
        for buf in self.buffers:
            raw = self.executor.read(buf.handle, buf.nbytes + GUARD_BYTES)
            out[buf.arg.name] = (raw[: buf.nbytes], raw[buf.nbytes:])
        return out


def _first_indices(mask: np.ndarray, count: int = 5) -> list[int]:
    return [int(i) for i in np.flatnonzero(mask)[:count]]


def check_outputs(problem: Problem, dtype: str, sizes: dict[str, int], inputs: dict[str, np.ndarray],
                  reference: dict[str, tuple[np.ndarray, np.ndarray | None]],
                  state: dict[str, tuple[np.ndarray, np.ndarray]], ws: Workspace) -> dict[str, Any] | None:
    """Return the first failing check as a dict, or None when everything passes. Adds error stats to `stats`."""
    for buf in ws.buffers:
        body, guard = state[buf.arg.name]
        if not np.all(guard == CANARY):
            bad = np.flatnonzero(guard != CANARY)
            return {"check": "out_of_bounds_write",
                    "message": f"bytes were written past the end of buffer {buf.arg.name} "
                               f"({buf.nbytes} bytes): guard bytes at offsets +{bad[:5].tolist()} changed",
                    "buffer": buf.arg.name}
        if not buf.arg.is_output and not np.array_equal(body, np.ascontiguousarray(inputs[buf.arg.name]).view(
                np.uint8)):
            changed = body.view(STORAGE[buf.arg.dtype]) != inputs[buf.arg.name]
            return {"check": "input_modified",
                    "message": f"input {buf.arg.name} was modified by the kernel "
                               f"({int(changed.sum())} elements, first at {_first_indices(changed)})",
                    "buffer": buf.arg.name}
    tol = problem.tolerance(dtype)
    for buf in ws.buffers:
        if not buf.arg.is_output:
            continue
        body, _ = state[buf.arg.name]
        stored = body.view(STORAGE[buf.arg.dtype])
        poison = np.frombuffer(bytes([POISON]) * stored.itemsize, dtype=stored.dtype)[0]
        unwritten = stored.view(np.uint8).reshape(-1, stored.itemsize).min(axis=1) == POISON
        if unwritten.any():
            return {"check": "unwritten_output",
                    "message": f"{int(unwritten.sum())} of {stored.size} elements of {buf.arg.name} were never "
                               f"written (still hold the NaN poison {poison!r}); first at "
                               f"{_first_indices(unwritten)}",
                    "buffer": buf.arg.name, "indices": _first_indices(unwritten)}
        values = to_float64(stored, buf.arg.dtype)
        nonfinite = ~np.isfinite(values)
        if nonfinite.any():
            return {"check": "nan_or_inf",
                    "message": f"{int(nonfinite.sum())} elements of {buf.arg.name} are NaN or Inf; first at "
                               f"{_first_indices(nonfinite)}",
                    "buffer": buf.arg.name, "indices": _first_indices(nonfinite)}
        ref, where = reference[buf.arg.name]
        got = values if where is None else values[where]
        err = got - ref
        ref_norm = float(np.linalg.norm(ref)) or 1.0
        rel_l2 = float(np.linalg.norm(err)) / ref_norm
        rms = ref_norm / math.sqrt(ref.size)
        scaled = np.abs(err) / (np.abs(ref) + rms)
        worst = int(np.argmax(scaled))
        stats = {"rel_l2_error": rel_l2, "max_scaled_error": float(scaled[worst]),
                 "checked_elements": int(ref.size), "total_elements": int(values.size)}
        ws.last_stats = stats  # type: ignore[attr-defined]
        if rel_l2 > tol.rel_l2 or scaled[worst] > tol.elementwise:
            bad = scaled > tol.elementwise
            flat = np.flatnonzero(bad)[:5] if bad.any() else np.array([worst])
            idx = flat if where is None else where[flat]
            samples = [{"index": int(i), "got": float(got[j]), "expected": float(ref[j])} for i, j in zip(idx, flat,
                                                                                                     strict=True)]
            return {"check": "wrong_result",
                    "message": f"{buf.arg.name} differs from the float64 reference: relative L2 error {rel_l2:.3e} "
                               f"(tolerance {tol.rel_l2:.0e}), {int(bad.sum())} elements over the elementwise bound "
                               f"{tol.elementwise:.0e}; first failing {samples[:3]}",
                    "buffer": buf.arg.name, "samples": samples, **stats}
    return None


@dataclass
class Validated:
    """A verdict plus what the benchmark reuses: the loaded workspace, its inputs and their reference."""

    verdict: dict[str, Any]
    workspace: Workspace | None = None
    inputs: dict[str, np.ndarray] | None = None
    reference: dict[str, tuple[np.ndarray, np.ndarray | None]] | None = None


def validate(executor: Executor, kernel: Compiled, problem: Problem, dtype: str, sizes: dict[str, int], *,
             trials: int, seed: int, progress: Progress) -> Validated:
    """Run the checks on `trials` fresh input sets; the workspace stays loaded with the last one."""
    geometry = kernel.spec.evaluate(sizes)
    why = executor.check_geometry(kernel, geometry)
    if why:
        return Validated({"passed": False, "check": "launch_geometry", "message": why, "trials": 0})
    ws = Workspace(executor, problem, dtype, sizes)
    stats: dict[str, Any] = {}
    inputs: dict[str, np.ndarray] = {}
    reference: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
    for trial in range(trials):
        rng = np.random.default_rng(seed + trial)
        inputs = problem.make_inputs(sizes, dtype, rng)
        progress(f"validate trial {trial + 1}/{trials}: reference")
        reference = problem.reference(inputs, sizes, dtype, rng, REFERENCE_MAX_FLOPS)
        ws.load(inputs)
        progress(f"validate trial {trial + 1}/{trials}: launch")
        executor.run(kernel, ws.handles, ws.scalars, geometry)
        state = ws.read_all()
        failure = check_outputs(problem, dtype, sizes, inputs, reference, state, ws)
        if failure:
            return Validated({"passed": False, "trials": trial + 1, **failure}, ws, inputs, reference)
        stats = getattr(ws, "last_stats", {})
        if trial == 0:
            progress("validate: repeat launch (race check)")
            ws.poison_outputs()
            executor.run(kernel, ws.handles, ws.scalars, geometry)
            again = ws.read_all()
            for buf in ws.buffers:
                if buf.arg.is_output and not np.array_equal(state[buf.arg.name][0], again[buf.arg.name][0]):
                    first = to_float64(state[buf.arg.name][0].view(STORAGE[buf.arg.dtype]), buf.arg.dtype)
                    second = to_float64(again[buf.arg.name][0].view(STORAGE[buf.arg.dtype]), buf.arg.dtype)
                    with np.errstate(invalid="ignore"):
                        moved = ~(first == second)
                    drift = float(np.nanmax(np.abs(first - second))) if np.isfinite(second).all() else math.inf
                    verdict = {"passed": False, "trials": 1, "check": "nondeterministic",
                            "message": f"two launches on the same inputs gave different {buf.arg.name} "
                                       f"({int(moved.sum())} elements differ, max difference {drift:.3e}, first at "
                                       f"{_first_indices(moved)}): a race, a missing barrier or a read of memory "
                                       "nothing wrote", "indices": _first_indices(moved)}
                    return Validated(verdict, ws, inputs, reference)
    tol = problem.tolerance(dtype)
    verdict = {"passed": True, "check": None, "trials": trials,
               "message": f"all {trials} trials passed (tolerance rel L2 {tol.rel_l2:.0e})", **stats}
    return Validated(verdict, ws, inputs, reference)


WARMUP_S = 0.2
MAX_WARMUP_REPS = 4096


def benchmark(executor: Executor, kernel: Compiled, problem: Problem, dtype: str, sizes: dict[str, int],
              validated: Validated, *, time_budget_s: float, min_reps: int, max_reps: int,
              progress: Progress) -> dict[str, Any]:
    """Time the kernel from a cold cache; re-check the output after the timed loop."""
    ws, inputs, reference = validated.workspace, validated.inputs, validated.reference
    assert ws is not None and inputs is not None and reference is not None
    geometry = kernel.spec.evaluate(sizes)
    progress("benchmark: warm-up")
    # Warm up for a time, not a count: GPU clocks take tens of milliseconds to ramp, so a few launches of a fast
    # kernel would leave the first timed ones slow. Doubling chunks keep slow kernels to one or two launches.
    warm: list[float] = []
    started = time.monotonic()
    while time.monotonic() - started < WARMUP_S and len(warm) < MAX_WARMUP_REPS:
        warm += executor.time(kernel, ws.handles, ws.scalars, geometry, reps=max(1, len(warm)), cold_cache=True)
    per_launch_s = max(float(np.median(warm[len(warm) // 2:])) / 1e3, 1e-6)
    reps = timed_reps(per_launch_s, time_budget_s, min_reps, max_reps)
    ws.poison_outputs()  # the output checked below must come from the timed launches
    times: list[float] = []
    started = time.monotonic()
    while len(times) < reps:
        chunk = min(reps - len(times), max(1, int(1.0 / (per_launch_s + 2e-4))))
        times += executor.time(kernel, ws.handles, ws.scalars, geometry, reps=chunk, cold_cache=True)
        progress(f"benchmark: {len(times)}/{reps} timed launches")
    wall = time.monotonic() - started
    failure = check_outputs(problem, dtype, sizes, inputs, reference, ws.read_all(), ws)
    return {**summarize(times, problem.flops(sizes), problem.min_bytes(sizes, dtype)), "wall_s": wall,
            "recheck": failure or {"passed": True}}


def timed_reps(per_launch_s: float, time_budget_s: float, min_reps: int, max_reps: int) -> int:
    """Launches to time: as many as fit the budget, at least min_reps, at most max_reps. A kernel whose one
    launch outlasts the whole budget gets 3 (enough for a median and a spread), not min_reps launches of
    seconds or minutes each."""
    floor = min_reps if per_launch_s <= time_budget_s else min(3, min_reps)
    return int(min(max_reps, max(floor, time_budget_s / (per_launch_s + 2e-4))))


def summarize(times_ms: list[float], flops: float, min_bytes: float) -> dict[str, Any]:
    arr = np.asarray(times_ms, dtype=np.float64)
    median = float(np.median(arr))
    return {
        "reps": int(arr.size),
        "median_ms": median,
        "min_ms": float(arr.min()),
        "max_ms": float(arr.max()),
        "mean_ms": float(arr.mean()),
        "cv": float(arr.std() / arr.mean()) if arr.mean() > 0 else 0.0,
        "tflops": flops / (median * 1e-3) / 1e12 if median > 0 else 0.0,
        "gbps": min_bytes / (median * 1e-3) / 1e9 if median > 0 else 0.0,
        "cold_cache": True,
    }
