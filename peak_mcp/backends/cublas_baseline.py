"""cuBLAS matmul baseline through CuPy (a maintained binding), timed like the kernels: cold L2, CUDA events."""

from __future__ import annotations

from typing import Any

import cupy as cp
import numpy as np

from peak_mcp.dtypes import to_float64
from peak_mcp.evaluation import summarize


def time_cublas_matmul(dtype: str, sizes: dict[str, int], inputs: dict[str, np.ndarray], budget_s: float,
                       flush_bytes: int) -> dict[str, Any]:
    from cupy_backends.cuda.libs import cublas

    m, n, k = sizes["M"], sizes["N"], sizes["K"]
    a = cp.asarray(inputs["A"])
    b = cp.asarray(inputs["B"])
    c = cp.empty(m * n, dtype=cp.float32)
    flush = cp.empty(flush_bytes, dtype=cp.uint8)
    handle = cp.cuda.device.get_cublas_handle()
    one, zero = np.array(1.0, np.float32), np.array(0.0, np.float32)
    data_type = {"f32": 0, "f16": 2, "bf16": 14}[dtype]  # CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF
    compute = cublas.CUBLAS_COMPUTE_32F  # plain FP32 accumulation: no TF32 for f32, like the kernels

    def gemm() -> None:
        # Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: swap the operands, no transposes.
        cublas.gemmEx(handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, n, m, k, one.ctypes.data,
                      b.data.ptr, data_type, n, a.data.ptr, data_type, k, zero.ctypes.data,
                      c.data.ptr, 0, n, compute, -1)  # -1 = CUBLAS_GEMM_DEFAULT

    def timed(reps: int) -> list[float]:
        pairs = []
        for rep in range(reps):
            flush.fill(rep & 0xFF)
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            gemm()
            end.record()
            pairs.append((start, end))
        cp.cuda.Stream.null.synchronize()
        return [cp.cuda.get_elapsed_time(s, e) for s, e in pairs]

    warm = timed(3)
    per = max(float(np.median(warm)) / 1e3, 1e-6)
    times = timed(int(min(1000, max(10, budget_s / (per + 2e-4)))))
    # Sanity-check a few rows so a wrong call never becomes the yardstick.
    rows = np.array([0, m // 2, m - 1])
    a64 = to_float64(inputs["A"], dtype).reshape(m, k)[rows]
    ref = a64 @ to_float64(inputs["B"], dtype).reshape(k, n)
    got = cp.asnumpy(c.reshape(m, n)[rows]).astype(np.float64)
    rel = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    flops = 2.0 * m * n * k
    return {"available": True, "library": f"cuBLAS (cupy {cp.__version__}, cublasGemmEx, COMPUTE_32F)",
            "rel_l2_error": rel, **summarize(times, flops, 0.0)}
