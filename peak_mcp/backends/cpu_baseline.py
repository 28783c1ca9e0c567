"""The yardstick of a CPU Vulkan device (lavapipe): the same matmul through numpy's BLAS on the same CPU.

A Vulkan driver that runs on the CPU has no vendor library and no datasheet peak, so without this an agent has
nothing to aim at. The BLAS the host's numpy links (OpenBLAS in the wheels) is what the same cores reach with a
tuned library; timed by `timing.measure` like every kernel (wall clock here: there is no device timer).

Timed like the kernels, and made steady. OpenBLAS splits a product over a thread per core; on a CPU shared with
other work (other processes, other sessions' workers) one of those threads is often descheduled, and then every
call waits out a scheduler slice: 4-20 ms for a product that takes 0.03 ms on idle cores. A busy second of that
read 16 ms at one session's start and 0.027 ms when re-timed, and put a kernel at 2,053% of the "vendor". The first
calls of a process pay thread start-up and first-touch page faults too. So: untimed calls first, then rounds apart
in time, each a `measure` (its own warm-up, the median of its calls); the yardstick is the quietest round's, with
every round's median kept (`rounds_ms`), and more rounds while they disagree. Each call starts from a cold cache
(a scratch buffer the size of the kernels' flush is overwritten before it, outside the timed interval), as each
kernel launch does.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from peak_mcp.core.dtypes import to_float64
from peak_mcp.core.timing import Chunk, measure

FLUSH_BYTES = 16 << 20  # what the Vulkan executor overwrites before each launch on a CPU device (vulkan_runtime)
FIRST_CALLS = 5  # untimed: BLAS threads started, pages touched
ROUNDS, MAX_ROUNDS = 3, 6
PAUSE_S = 0.25  # between rounds: a burst of other work that slows one round is over by the next
UNSTEADY = 1.5  # rounds whose medians differ more than this factor were disturbed: time more of them
ROUND_WARMUP_S = 0.05  # after the first round's full warm-up


def _gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    np.matmul(a, b, out=c)


def time_numpy_matmul(dtype: str, sizes: dict[str, int], inputs: dict[str, Any], budget_s: float,
                      flush_bytes: int = FLUSH_BYTES) -> dict[str, Any]:
    m, n, k = sizes["M"], sizes["N"], sizes["K"]
    # f16/bf16 inputs are widened to f32 first (numpy has no 16-bit BLAS); the widening is outside the timing.
    a = to_float64(np.asarray(inputs["A"]), dtype).astype(np.float32).reshape(m, k)
    b = to_float64(np.asarray(inputs["B"]), dtype).astype(np.float32).reshape(k, n)
    c = np.zeros((m, n), np.float32)  # zeros, not empty: its pages are touched here, not in a timed call
    scratch = np.zeros(max(1, flush_bytes), np.uint8)
    for _ in range(FIRST_CALLS):
        _gemm(a, b, c)

    def timed(chunk: Chunk) -> list[float]:
        times = []
        for rep in range(chunk.reps):
            scratch.fill((chunk.offset + rep) & 0xFF)  # evicts a, b and c from the caches, as before a kernel launch
            started = time.perf_counter()
            _gemm(a, b, c)
            times.append((time.perf_counter() - started) * 1e3)
        return times

    flops = 2.0 * m * n * k
    per_round = max(budget_s / ROUNDS, 0.02)
    rounds: list[dict[str, Any]] = []
    while len(rounds) < ROUNDS or (len(rounds) < MAX_ROUNDS and _unsteady(rounds)):
        if rounds:
            time.sleep(PAUSE_S)
        rounds.append(measure(timed, budget_s=per_round, min_reps=10, max_reps=1000, flops=flops,
                              warmup_s=ROUND_WARMUP_S if rounds else 0.2))
    quietest = min(rounds, key=lambda r: r["median_ms"])
    medians = [r["median_ms"] for r in rounds]
    note = (f"a CPU library on the same cores, not a Vulkan number; each call from a cold cache (a {flush_bytes >> 20} "
            f"MiB scratch buffer overwritten before it), as each kernel launch is; the median of the quietest of "
            f"{len(rounds)} rounds {PAUSE_S:g} s apart")
    if _unsteady(rounds):
        note += (f". The rounds disagreed ({min(medians):.3g} to {max(medians):.3g} ms): the CPU was busy with "
                 "other work meanwhile, and kernels timed now may read slow too")
    blas = (np.show_config(mode="dicts") or {}).get("Build Dependencies", {}).get("blas", {}).get("name", "BLAS")
    return {"available": True, "library": f"numpy {np.__version__} ({blas}) f32 matmul on the same CPU", "note": note,
            **quietest, "cold_cache": True, "rounds_ms": medians}


def _unsteady(rounds: list[dict[str, Any]]) -> bool:
    medians = [r["median_ms"] for r in rounds]
    return len(medians) > 1 and max(medians) > UNSTEADY * min(medians)
