"""The yardstick of a CPU Vulkan device (lavapipe): the same matmul through numpy's BLAS on the same CPU.

A Vulkan driver that runs on the CPU has no vendor library and no datasheet peak, so without this an agent has
nothing to aim at. The BLAS the host's numpy links (OpenBLAS in the wheels) is what the same cores reach with a
tuned library; timed by `timing.measure` like every kernel (wall clock here: there is no device timer).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from peak_mcp.dtypes import to_float64
from peak_mcp.timing import Chunk, measure


def time_numpy_matmul(dtype: str, sizes: dict[str, int], inputs: dict[str, Any], budget_s: float) -> dict[str, Any]:
    m, n, k = sizes["M"], sizes["N"], sizes["K"]
    # f16/bf16 inputs are widened to f32 first (numpy has no 16-bit BLAS); the widening is outside the timing.
    a = to_float64(np.asarray(inputs["A"]), dtype).astype(np.float32).reshape(m, k)
    b = to_float64(np.asarray(inputs["B"]), dtype).astype(np.float32).reshape(k, n)
    c = np.empty((m, n), np.float32)

    def timed(chunk: Chunk) -> list[float]:
        times = []
        for _ in range(chunk.reps):
            started = time.perf_counter()
            np.matmul(a, b, out=c)
            times.append((time.perf_counter() - started) * 1e3)
        return times

    summary = measure(timed, budget_s=budget_s, min_reps=3, max_reps=1000, flops=2.0 * m * n * k)
    blas = (np.show_config(mode="dicts") or {}).get("Build Dependencies", {}).get("blas", {}).get("name", "BLAS")
    return {"available": True, "library": f"numpy {np.__version__} ({blas}) f32 matmul on the same CPU",
            "note": "a CPU library, timed warm (no cache flush): what these cores reach, not a Vulkan number",
            **summary, "cold_cache": False}
