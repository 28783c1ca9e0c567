"""cuBLAS matmul baseline through CuPy (a maintained binding), timed like the kernels (`timing.measure`: the same
warm-up, budget and summary; cold L2, CUDA events)."""

from __future__ import annotations

from typing import Any

import cupy as cp
import numpy as np

from peak_mcp.backends.base import vendor_matmul_result
from peak_mcp.core.timing import Chunk, measure


def time_cublas_matmul(dtype: str, sizes: dict[str, int], inputs: dict[str, Any], budget_s: float,
                       flush: Any, *, min_reps: int = 10, max_reps: int = 1000) -> dict[str, Any]:
    """Inputs are cupy arrays in storage dtype; `flush` a ColdL2, flushed before each launch. Runs on cupy's
    current stream (the executor's)."""
    from cupy_backends.cuda.libs import cublas

    m, n, k = sizes["M"], sizes["N"], sizes["K"]
    a, b = cp.asarray(inputs["A"]), cp.asarray(inputs["B"])
    c = cp.empty(m * n, dtype=cp.float32)
    stream = cp.cuda.get_current_stream()
    handle = cp.cuda.device.get_cublas_handle()
    cublas.setStream(handle, stream.ptr)
    one, zero = np.array(1.0, np.float32), np.array(0.0, np.float32)
    data_type = {"f32": 0, "f16": 2, "bf16": 14}[dtype]  # CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF
    compute = cublas.CUBLAS_COMPUTE_32F  # plain FP32 accumulation: no TF32 for f32, like the kernels

    def gemm() -> None:
        # Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: swap the operands, no transposes.
        cublas.gemmEx(handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, n, m, k, one.ctypes.data,
                      b.data.ptr, data_type, n, a.data.ptr, data_type, k, zero.ctypes.data,
                      c.data.ptr, 0, n, compute, -1)  # -1 = CUBLAS_GEMM_DEFAULT

    def timed(chunk: Chunk) -> list[float]:
        pairs = []
        for rep in range(chunk.reps):
            flush.flush(chunk.offset + rep)
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            gemm()
            end.record(stream)
            pairs.append((start, end))
        stream.synchronize()
        return [cp.cuda.get_elapsed_time(s, e) for s, e in pairs]

    flops = 2.0 * m * n * k
    summary = measure(timed, budget_s=budget_s, min_reps=min_reps, max_reps=max_reps, flops=flops)
    return vendor_matmul_result(f"cuBLAS (cupy {cp.__version__}, cublasGemmEx, COMPUTE_32F)", c, a, b, dtype, sizes,
                                summary, xp=cp)
