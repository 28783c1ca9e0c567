"""hipBLAS matmul baseline on an AMD GPU through hip-python's hipblas module, timed like the kernels
(`timing.measure`, HIP events, the executor's stream and L2 flush buffer).

NOT VERIFIED ON AMD HARDWARE, like the executor it serves (backends/hip_amd.py): written from hipBLAS's C API
(hipblasGemmEx, the non-V2 signature whose compute type is a hipblasDatatype_t) as hip-python binds it. The
executor turns any failure here into "baseline unavailable" with the reason, so a session never breaks on it.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from peak_mcp.backends.base import vendor_matmul_result
from peak_mcp.backends.hip_errors import check as _check
from peak_mcp.core.timing import Chunk, measure


def time_hipblas_matmul(executor: Any, dtype: str, sizes: dict[str, int], inputs: dict[str, np.ndarray],
                        budget_s: float, *, min_reps: int = 10, max_reps: int = 1000) -> dict[str, Any]:
    """Row-major C = A·B as column-major Cᵀ = Bᵀ·Aᵀ (operands swapped, no transposes), f32 accumulation."""
    from hip import hipblas  # optional dependency: ImportError tells the caller what to install

    m, n, k = sizes["M"], sizes["N"], sizes["K"]
    kind = hipblas.hipblasDatatype_t
    element = {"f32": kind.HIPBLAS_R_32F, "f16": kind.HIPBLAS_R_16F, "bf16": kind.HIPBLAS_R_16B}[dtype]
    a, b = (executor.alloc(inputs[x].nbytes) for x in ("A", "B"))
    c = executor.alloc(m * n * 4)
    handle = None
    try:
        executor.write(a, inputs["A"].view(np.uint8))
        executor.write(b, inputs["B"].view(np.uint8))
        handle = _check(hipblas.hipblasCreate())
        _check(hipblas.hipblasSetStream(handle, executor.stream))
        one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
        op = hipblas.hipblasOperation_t.HIPBLAS_OP_N

        def gemm() -> None:
            _check(hipblas.hipblasGemmEx(handle, op, op, n, m, k, ctypes.addressof(one), b.ptr, element, n, a.ptr,
                                         element, k, ctypes.addressof(zero), c.ptr, kind.HIPBLAS_R_32F, n,
                                         kind.HIPBLAS_R_32F, hipblas.hipblasGemmAlgo_t.HIPBLAS_GEMM_DEFAULT))

        def timed(chunk: Chunk) -> list[float]:
            return executor.event_times(chunk.reps, lambda rep: executor.flush_l2(chunk.offset + rep),
                                        lambda rep: gemm())

        summary = measure(timed, budget_s=budget_s, min_reps=min_reps, max_reps=max_reps, flops=2.0 * m * n * k)
        product = executor.read(c, m * n * 4).view(np.float32)  # checked on the host: buffers are host copies here
        return vendor_matmul_result("hipBLAS (hip-python, hipblasGemmEx, f32 compute)", product, inputs["A"],
                                    inputs["B"], dtype, sizes, summary)
    finally:
        if handle is not None:
            hipblas.hipblasDestroy(handle)
        for buf in (a, b, c):
            executor.free(buf)
