"""The benchmark's per-launch audit (device arrays) without a GPU: the evaluator runs over an executor that keeps
its buffers in numpy but presents them as device arrays, so the audit, the rotation of input sets across chunks
of any length and the input perturbation run exactly as they do on CUDA. The kernels are Python functions."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import peak_mcp.core.timing
from peak_mcp.backends.base import Compiled, DeviceFacts, Executor
from peak_mcp.backends.registry import launch_spec
from peak_mcp.core.launch import LaunchSpec
from peak_mcp.evaluation.steps import benchmark, validate
from peak_mcp.problems.shipped import get_problem

SIZES = {"M": 24, "N": 20, "K": 12}
PROBLEM = get_problem("matmul")
Kernel = Callable[[np.ndarray, np.ndarray, dict[str, int], int], np.ndarray]  # A, B, sizes, launch -> C


def _device_numpy() -> Any:
    """numpy under the names the validator uses for cupy (a distinct object, so it counts as device arrays)."""
    xp = types.SimpleNamespace(**{name: getattr(np, name) for name in dir(np) if not name.startswith("__")})
    xp.asnumpy = np.asarray
    xp.random = types.SimpleNamespace(RandomState=lambda seed, method=None: np.random.RandomState(seed))
    xp.cuda = types.SimpleNamespace(curand=types.SimpleNamespace(CURAND_RNG_PSEUDO_PHILOX4_32_10=0))
    return xp


class HostAsDevice(Executor):
    backend = "cuda"

    def __init__(self) -> None:
        self.facts = DeviceFacts("cuda", 0, "host as device")
        self.xp = _device_numpy()
        self.launches = 0

    def compile(self, source: str, spec: LaunchSpec) -> Compiled:
        raise NotImplementedError

    def alloc(self, nbytes: int) -> np.ndarray:
        return np.zeros(nbytes, np.uint8)

    def free(self, buf: np.ndarray) -> None:
        pass

    def write(self, buf: np.ndarray, data: Any, offset: int = 0) -> None:
        raw = np.asarray(data).reshape(-1).view(np.uint8)
        buf[offset:offset + raw.size] = raw

    def read(self, buf: np.ndarray, nbytes: int, offset: int = 0) -> np.ndarray:
        return buf[offset:offset + nbytes].copy()

    def pointer(self, buf: np.ndarray, offset: int) -> tuple[np.ndarray, int]:
        return buf, offset

    def run(self, kernel: Compiled, buffers: list[Any], scalars: list[int], geometry: dict[str, Any]) -> None:
        (a, a_at), (b, b_at), (c, c_at) = buffers
        m, n, k = scalars
        sizes = {"M": m, "N": n, "K": k}
        left = a[a_at:a_at + m * k * 4].view(np.float32).reshape(m, k)
        right = b[b_at:b_at + k * n * 4].view(np.float32).reshape(k, n)
        out = kernel.handle(left, right, sizes, self.launches)
        if out is not None:
            c[c_at:c_at + m * n * 4] = out.astype(np.float32).reshape(-1).view(np.uint8)
        self.launches += 1

    def time(self, kernel: Compiled, buffer_sets: list[list[Any]], scalars: list[int], geometry: dict[str, Any],
             reps: int, cold_cache: bool, poison: list[Any] | None = None,
             after_each: Callable[[int], None] | None = None) -> list[float]:
        for rep in range(reps):
            for (buf, offset), nbytes in poison[rep % len(poison)] if poison else ():
                buf[offset:offset + nbytes] = 0xFF
            self.run(kernel, buffer_sets[rep % len(buffer_sets)], scalars, geometry)
            if after_each is not None:
                after_each(rep)
        return [1.0] * reps


def _honest(a: np.ndarray, b: np.ndarray, sizes: dict[str, int], launch: int) -> np.ndarray:
    return a.astype(np.float64) @ b.astype(np.float64)


def _run(kernel: Kernel, monkeypatch: pytest.MonkeyPatch, *, sets: int, min_reps: int = 7) -> Any:
    monkeypatch.setattr(peak_mcp.core.timing, "CHUNK_S", 1e-9)  # every timed chunk one launch: never a whole rotation
    source = PROBLEM.naive_kernel("cuda", "f32")
    spec = launch_spec(source, "cuda", PROBLEM.symbols)
    executor, compiled = HostAsDevice(), Compiled(handle=kernel, spec=spec)
    validated = validate(executor, compiled, PROBLEM, "f32", SIZES, trials=sets, seed=3, progress=lambda _: None,
                         sets=sets)
    assert validated.verdict.passed, validated.verdict
    try:
        return benchmark(executor, compiled, PROBLEM, "f32", SIZES, validated, time_budget_s=1.0,
                         min_reps=min_reps, max_reps=min_reps, progress=lambda _: None)
    finally:
        validated.close()


@pytest.mark.parametrize("sets", [2, 3])
def test_an_honest_kernel_passes_the_audit_over_one_launch_chunks(sets: int, monkeypatch: pytest.MonkeyPatch) -> None:
    timing = _run(_honest, monkeypatch, sets=sets)
    assert timing.recheck.passed, timing.recheck
    assert timing.reps % sets == 0 and timing.reps >= 7


def test_as_many_launches_as_sets_leave_the_final_inputs_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each set's last launch is also its first: its inputs must stay as it saw them for the host's recheck."""
    timing = _run(_honest, monkeypatch, sets=2, min_reps=2)
    assert timing.reps == 2 and timing.recheck.passed, timing.recheck


def test_no_timed_launch_sees_inputs_an_earlier_launch_saw(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel keeping C by a full fingerprint of its inputs would replay it, correct and free, on any launch
    whose inputs an earlier launch (validation and warm-up included) already saw."""
    seen: list[bytes] = []

    def fingerprinting(a: np.ndarray, b: np.ndarray, sizes: dict[str, int], launch: int) -> np.ndarray:
        seen.append(a.tobytes() + b.tobytes())
        return _honest(a, b, sizes, launch)

    timing = _run(fingerprinting, monkeypatch, sets=2)
    timed = seen[-timing.reps:]
    assert all(key not in seen[:len(seen) - timing.reps + i] for i, key in enumerate(timed))


def test_a_kernel_replaying_a_result_for_similar_inputs_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Caches C by a cheap fingerprint (the first elements): a perturbed element elsewhere makes the replay wrong."""
    cache: dict[bytes, np.ndarray] = {}

    def replaying(a: np.ndarray, b: np.ndarray, sizes: dict[str, int], launch: int) -> np.ndarray:
        key = a.tobytes()[:64] + b.tobytes()[:64]
        if key not in cache:
            cache[key] = _honest(a, b, sizes, launch)
        return cache[key]

    timing = _run(replaying, monkeypatch, sets=2)
    assert not timing.recheck.passed and timing.recheck.check == "wrong_result", timing.recheck


def test_a_kernel_that_skips_every_other_launch_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def lazy(a: np.ndarray, b: np.ndarray, sizes: dict[str, int], launch: int) -> np.ndarray | None:
        return _honest(a, b, sizes, launch) if launch < 8 or launch % 2 else None

    timing = _run(lazy, monkeypatch, sets=2, min_reps=8)
    assert not timing.recheck.passed and "timed launches" in timing.recheck.message, timing.recheck
