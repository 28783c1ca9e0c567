"""Matrix multiplication C = A·B, row-major; A is M×K, B is K×N, C is M×N (f32 output, f32 accumulation)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from peak_mcp.dtypes import C_TYPES, from_float, itemsize, to_float64
from peak_mcp.errors import InvalidInput
from peak_mcp.problems.base import BufferArg, Problem, ScalarArg, Sizes, Tolerance

_CUDA_HEADERS = {"f32": "", "f16": "#include <cuda_fp16.h>\n", "bf16": "#include <cuda_bf16.h>\n"}
_CUDA_LOAD = {"f32": "{x}", "f16": "__half2float({x})", "bf16": "__bfloat162float({x})"}

_CUDA_NAIVE = """{headers}// Naive matmul: one thread per element of C, no reuse of loaded data.
// peak: entry=matmul grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
extern "C" __global__ void matmul(const {T}* A, const {T}* B, float* C, int M, int N, int K)
{{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc += {a} * {b};
    C[row * N + col] = acc;
}}
"""

_HLSL_NAIVE = """// Naive matmul: one thread per element of C, no reuse of loaded data.
// peak: entry=main groups=(cdiv(N, 16), cdiv(M, 16), 1)
struct Params {{ uint M; uint N; uint K; }};
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<{T}> A;
[[vk::binding(1)]] StructuredBuffer<{T}> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;

[numthreads(16, 16, 1)]
void main(uint3 id : SV_DispatchThreadID)
{{
    uint row = id.y, col = id.x;
    if (row >= p.M || col >= p.N) return;
    float acc = 0.0;
    for (uint k = 0; k < p.K; ++k)
        acc += float(A[row * p.K + k]) * float(B[k * p.N + col]);
    C[row * p.N + col] = acc;
}}
"""

_HLSL_TYPES = {"f32": "float", "f16": "half"}


class Matmul(Problem):
    name = "matmul"
    title = "Matrix multiplication C = A·B (row-major, f32 accumulation and output)"
    symbols = ("M", "N", "K")
    default_sizes = {"M": 4096, "N": 4096, "K": 4096}  # noqa: RUF012 - read-only class data
    dtypes = ("f32", "f16", "bf16")

    def arguments(self, dtype: str) -> list[BufferArg | ScalarArg]:
        return [
            BufferArg("A", dtype, lambda s: s["M"] * s["K"]),
            BufferArg("B", dtype, lambda s: s["K"] * s["N"]),
            BufferArg("C", "f32", lambda s: s["M"] * s["N"], is_output=True),
            ScalarArg("M", lambda s: s["M"]),
            ScalarArg("N", lambda s: s["N"]),
            ScalarArg("K", lambda s: s["K"]),
        ]

    def abi(self, backend: str, dtype: str) -> str:
        if backend == "hlsl":
            t = _HLSL_TYPES.get(dtype, "float")
            return (
                "Row-major C = A·B; A is M×K, B is K×N, C is M×N; accumulate and store in float.\n"
                f"[[vk::binding(0)]] A ({t}), [[vk::binding(1)]] B ({t}), [[vk::binding(2)]] C (float, read-write): "
                "StructuredBuffer/RWStructuredBuffer or ByteAddressBuffer/RWByteAddressBuffer.\n"
                "Sizes in a push-constant block: struct Params { uint M; uint N; uint K; }; "
                "[[vk::push_constant]] ConstantBuffer<Params> p;\n"
                "Annotation: // peak: entry=main groups=(gx, gy, gz); the thread-group size is [numthreads]."
            )
        t = C_TYPES[dtype]
        return (
            "Row-major C = A·B; A is M×K, B is K×N, C is M×N; accumulate and store in float.\n"
            f'extern "C" __global__ void <entry>(const {t}* A, const {t}* B, float* C, int M, int N, int K)\n'
            "Annotation: // peak: entry=<entry> grid=(gx, gy, gz) block=(bx, by, bz) shared=<dynamic bytes>.\n"
            "Buffers are 256-byte aligned; sizes need not be multiples of any tile unless the kernel says so."
        )

    def make_inputs(self, sizes: Sizes, dtype: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
        def draw(count: int) -> np.ndarray:
            values = rng.uniform(-1.0, 1.0, count).astype(np.float32)
            values[values == 0] = 0.5  # never zeros
            return from_float(values, dtype)

        return {"A": draw(sizes["M"] * sizes["K"]), "B": draw(sizes["K"] * sizes["N"])}

    def reference(self, inputs: Mapping[str, np.ndarray], sizes: Sizes, dtype: str,
                  rng: np.random.Generator, max_flops: float) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
        m, n, k = sizes["M"], sizes["N"], sizes["K"]
        a = to_float64(inputs["A"], dtype).reshape(m, k)
        b = to_float64(inputs["B"], dtype).reshape(k, n)
        if self.flops(sizes) <= max_flops:
            return {"C": ((a @ b).reshape(-1), None)}
        # Whole random rows, always including the first and last, so edge tiles are covered too.
        count = max(2, min(m, int(max_flops // (2.0 * n * k))))
        rows = np.unique(np.concatenate([[0, m - 1], rng.choice(m, size=count - 2, replace=False)]))
        values = a[rows] @ b
        indices = (rows[:, None] * n + np.arange(n)[None, :]).reshape(-1)
        return {"C": (values.reshape(-1), indices)}

    def flops(self, sizes: Sizes) -> float:
        return 2.0 * sizes["M"] * sizes["N"] * sizes["K"]

    def min_bytes(self, sizes: Sizes, dtype: str) -> float:
        m, n, k = sizes["M"], sizes["N"], sizes["K"]
        return float((m * k + k * n) * itemsize(dtype) + m * n * 4)

    def tolerance(self, dtype: str) -> Tolerance:
        # Inputs are exact in their storage type and the reference uses those exact values, so only the f32
        # accumulation contributes error; 16-bit paths get room for tensor-core accumulation order.
        return Tolerance(rel_l2=1e-5, elementwise=1e-3) if dtype == "f32" else Tolerance(rel_l2=1e-3, elementwise=2e-2)

    def peak_path(self, dtype: str) -> str:
        return {"f32": "fp32", "f16": "fp16_tensor", "bf16": "bf16_tensor"}[dtype]

    def naive_kernel(self, backend: str, dtype: str) -> str:
        if backend in ("cuda", "hip"):
            load = _CUDA_LOAD[dtype]
            return _CUDA_NAIVE.format(
                headers=_CUDA_HEADERS[dtype], T=C_TYPES[dtype],
                a=load.format(x="A[row * K + k]"), b=load.format(x="B[k * N + col]"),
            )
        if backend == "hlsl":
            if dtype not in _HLSL_TYPES:
                raise InvalidInput(f"matmul on HLSL offers {sorted(_HLSL_TYPES)}, not {dtype}",
                                   "use dtype f32 (or f16 where the device has shaderFloat16).")
            return _HLSL_NAIVE.format(T=_HLSL_TYPES[dtype])
        raise InvalidInput(f"unknown backend {backend!r}", "choose cuda, hip or hlsl.")
