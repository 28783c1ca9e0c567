"""Matrix multiplication C = A·B, row-major; A is M×K, B is K×N, C is M×N (f32 output, f32 accumulation)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from peak_mcp.core.dtypes import C_TYPES, from_float, itemsize, to_float64, uniform
from peak_mcp.core.errors import InvalidInput
from peak_mcp.problems.base import BufferArg, Problem, Reference, ScalarArg, Sizes, Tolerance

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

# HIP: the same kernel in HIP's spelling (HIP's header, types and casts). It runs on AMD and, through the CUDA
# device header, on NVIDIA.
_HIP_TYPES = {"f32": "float", "f16": "__half", "bf16": "hip_bfloat16"}
_HIP_HEADERS = {"f32": "", "f16": "#include <hip/hip_fp16.h>\n", "bf16": "#include <hip/hip_bfloat16.h>\n"}

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
    traits = ("gemm",)
    yardstick = "gemm"  # cuBLAS, hipBLAS, numpy's BLAS on a CPU Vulkan device

    def arguments(self, dtype: str) -> list[BufferArg | ScalarArg]:
        return [
            BufferArg("A", dtype, lambda s: (s["M"], s["K"])),
            BufferArg("B", dtype, lambda s: (s["K"], s["N"])),
            BufferArg("C", "f32", lambda s: (s["M"], s["N"]), is_output=True),
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
                "Annotation: // peak: entry=main groups=(gx, gy, gz); the thread-group size is [numthreads].\n"
                "Sizes need not be multiples of any tile unless the session says so.\n"
                "C is poisoned before every launch and must be fully written, the same bits on every launch "
                "(no atomics into C)."
            )
        t = (_HIP_TYPES if backend == "hip" else C_TYPES)[dtype]
        hip = (
            "HIP: include <hip/hip_runtime.h> (and <hip/hip_fp16.h> for __half, <hip/hip_bfloat16.h> for "
            "hip_bfloat16); no other headers. The same source targets AMD (64-lane waves) and, through a CUDA "
            "device header, NVIDIA (32-lane warps): use warpSize or a width argument, not a literal 64, and keep "
            "AMD-only builtins (MFMA) under #if defined(__HIP_PLATFORM_AMD__).\n" if backend == "hip" else "")
        return (
            "Row-major C = A·B; A is M×K, B is K×N, C is M×N; accumulate and store in float.\n"
            f'extern "C" __global__ void <entry>(const {t}* A, const {t}* B, float* C, int M, int N, int K)\n'
            "Annotation: // peak: entry=<entry> grid=(gx, gy, gz) block=(bx, by, bz) shared=<dynamic bytes>.\n"
            "Buffers are 256-byte aligned; sizes need not be multiples of any tile unless the session says so.\n"
            "C is poisoned before every launch and must be fully written, the same bits on every launch (no atomics "
            "into C); no __device__ variables or device malloc: nothing may outlive a launch.\n" + hip
        ).rstrip("\n")

    def make_inputs(self, sizes: Sizes, dtype: str, seed: int, xp: Any) -> dict[str, Any]:
        # Zero-mean uniform inputs: the elementwise bound below is calibrated for them.
        def draw(stream: int, count: int) -> Any:
            values = (uniform(xp, seed * 2 + stream, count) * 2.0 - 1.0).astype(np.float32)
            values[values == 0] = 0.5  # never zeros
            return from_float(values, dtype)

        return {"A": draw(0, sizes["M"] * sizes["K"]), "B": draw(1, sizes["K"] * sizes["N"])}

    def reference_at(self, inputs: Mapping[str, Any], sizes: Sizes, dtype: str, indices: np.ndarray,
                     to_host: Any) -> tuple[np.ndarray, np.ndarray]:
        # Only the rows of A and columns of B these elements need cross to the host.
        m, n, k = sizes["M"], sizes["N"], sizes["K"]
        rows, cols = indices // n, indices % n
        a = to_float64(to_host(inputs["A"].reshape(m, k)[rows]), dtype)
        b = to_float64(to_host(inputs["B"].reshape(k, n)[:, cols]), dtype)
        return np.einsum("ik,ki->i", a, b), np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=0))

    def reference(self, inputs: Mapping[str, Any], sizes: Sizes, dtype: str, seed: int, max_flops: float,
                  xp: Any) -> dict[str, Reference]:
        m, n, k = sizes["M"], sizes["N"], sizes["K"]
        a = to_float64(inputs["A"], dtype).reshape(m, k)
        b = to_float64(inputs["B"], dtype).reshape(k, n)
        # Error scale of C[i, j]: ||a_i|| * ||b_j|| (Cauchy-Schwarz bounds sum_k |a_ik b_kj| by it, and a correct
        # f32 accumulation in any order stays within a few roundoffs of it for zero-mean inputs).
        b_norms = xp.sqrt((b * b).sum(axis=0))
        if self.flops(sizes) <= max_flops:
            a_norms = xp.sqrt((a * a).sum(axis=1))
            return {"C": Reference((a @ b).reshape(-1), None, (a_norms[:, None] * b_norms[None, :]).reshape(-1))}
        # Whole random rows, always including the first and last, so edge tiles are covered too.
        count = max(2, min(m, int(max_flops // (2.0 * n * k))))
        chosen = np.random.default_rng(seed).choice(m, size=count - 2, replace=False)
        rows = xp.asarray(np.unique(np.concatenate([[0, m - 1], chosen])))
        picked = a[rows]
        a_norms = xp.sqrt((picked * picked).sum(axis=1))
        indices = (rows[:, None] * n + xp.arange(n)[None, :]).reshape(-1)
        return {"C": Reference((picked @ b).reshape(-1), indices, (a_norms[:, None] * b_norms[None, :]).reshape(-1))}

    def perturb(self, inputs: dict[str, Any], refs: dict[str, Reference], sizes: Sizes, dtype: str,
                rng: Any, xp: Any) -> dict[str, tuple[int, Any]]:
        # A[i, j] changes, so row i of C moves by (new - old) * B[j, :] and its error scale by the ratio of the
        # new to the old norm of row i of A: O(K + N) work on the device.
        m, n, k = sizes["M"], sizes["N"], sizes["K"]
        ref = refs["C"]
        if ref.indices is not None:  # a sampled host reference: no per-launch audit uses it
            return {}
        i, j = int(rng.integers(m)), int(rng.integers(k))
        flat = i * k + j
        new = from_float(xp.asarray([rng.uniform(0.25, 1.0) * rng.choice((-1.0, 1.0))], np.float32), dtype)
        old64, new64 = to_float64(inputs["A"][flat:flat + 1], dtype), to_float64(new, dtype)
        inputs["A"][flat:flat + 1] = new
        ref.values[i * n:(i + 1) * n] += (new64 - old64) * to_float64(inputs["B"][j * n:(j + 1) * n], dtype)
        a_row = to_float64(inputs["A"][i * k:(i + 1) * k], dtype)
        norm_new = xp.sqrt((a_row * a_row).sum())
        norm_old = xp.sqrt(xp.maximum(norm_new * norm_new - new64 * new64 + old64 * old64, 1e-300))
        ref.scale[i * n:(i + 1) * n] *= norm_new / norm_old
        return {"A": (flat, new)}

    def generality_sizes(self, sizes: Sizes) -> list[dict[str, int]]:
        m, n, k = sizes["M"], sizes["N"], sizes["K"]
        candidates = [
            (1, 1, 1),
            (7, 5, 3),  # below any tile
            (100, 77, 53),  # odd, nothing a multiple of a power of two
            (97, 89, 101),  # primes
            (128, 128, 129),  # tile-aligned except K
            (130, 66, 128),  # M and N one past a tile
            # rows of whole 16-byte chunks (TMA, vector loads) but no tile multiple anywhere: a kernel's fast path
            # with its partial tiles and K tail, which every size above sends down a fallback
            (203, 264, 72),
            (1031, 7, 67),  # tall and skinny
            (5, 1029, 35),  # short and wide
            (min(m, 512) + 3, min(n, 512) - 1 if min(n, 512) > 1 else 2, min(k, 512) + 1),  # near the session
        ]
        return [dict(zip(("M", "N", "K"), c, strict=True)) for c in candidates]

    def flops(self, sizes: Sizes) -> float:
        return 2.0 * sizes["M"] * sizes["N"] * sizes["K"]

    def min_bytes(self, sizes: Sizes, dtype: str) -> float:
        m, n, k = sizes["M"], sizes["N"], sizes["K"]
        return float((m * k + k * n) * itemsize(dtype) + m * n * 4)

    def tolerance(self, dtype: str, sizes: Sizes | None = None) -> Tolerance:
        # Inputs are exact in their storage type and the reference uses those exact values, so only the f32
        # accumulation contributes error. Simulated f32 accumulations (sequential without FMA, 8-way split-K,
        # BLAS) stay under 3.8 * 2**-24 * ||a_i|| * ||b_j|| over a million elements; factor 8 leaves 2x room.
        # Tensor cores may align and truncate inside a step, so 16-bit inputs get 4x the roundoff.
        # Tensor cores truncate as they add into the accumulator, so their error is biased and grows about linearly
        # with K (a simulation put the relative L2 error at 5e-5 and the worst element at 18 f32 roundoffs of
        # |row|·|column| at K = 32768): both bounds widen past K = 16384.
        if dtype == "f32":
            return Tolerance(rel_l2=1e-5, roundoff=2.0**-24, scale_words=_SCALE_WORDS)
        growth = max(1.0, (sizes or {}).get("K", 0) / 16384)
        return Tolerance(rel_l2=1e-4 * growth, roundoff=2.0**-22, factor=8.0 * growth, scale_words=_SCALE_WORDS)

    def peak_path(self, dtype: str, backend: str | None = None) -> str:
        if backend == "hlsl":
            return "fp32"
        return {"f32": "fp32", "f16": "fp16_tensor", "bf16": "bf16_tensor"}[dtype]

    def speed_limit(self, dtype: str, peaks: Mapping[str, float]) -> float | None:
        # f32 may legitimately run on tensor cores as 3xTF32 (three TF32 products keep f32 accuracy).
        own = peaks.get(self.peak_path(dtype))
        if dtype == "f32" and own and peaks.get("tf32_tensor"):
            return max(own, peaks["tf32_tensor"] / 3)
        return own

    def naive_kernel(self, backend: str, dtype: str) -> str:
        if backend == "hip":
            return _CUDA_NAIVE.format(headers="#include <hip/hip_runtime.h>\n" + _HIP_HEADERS[dtype],
                                      T=_HIP_TYPES[dtype], a="static_cast<float>(A[row * K + k])",
                                      b="static_cast<float>(B[k * N + col])")
        if backend == "cuda":
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

    def source_hints(self, source: str) -> dict[str, tuple[str, ...]]:
        found: dict[str, tuple[str, ...]] = {}
        if _coalesced(source):
            found["coalesced (x threads along n)"] = ("coalesced-access",)
        if _a_tile_transposed(source):
            found["A tile stored k-major (transposed)"] = ("transpose-a-tile-in-shared",)
        return found

    def suggestion_score(self, tags: tuple[str, ...] | list[str], sizes: Sizes,
                         units: int | None) -> tuple[float, list[str]]:
        if "small-mn" not in tags:
            return 0.0, []
        m, n, k = sizes.get("M", 0), sizes.get("N", 0), sizes.get("K", 0)
        tiles = -(-m // 128) * -(-n // 128)
        if units and tiles < units and k > max(m, n):
            return 2.0, [f"only {tiles} 128x128 tiles for {units} SMs and a long K ({k})"]
        return -1.0, []


_SCALE_WORDS = "|row of A|·|column of B|"



# suggest_next's matmul-only readings of a kernel source.
# A variable set from the x thread index: `col = blockIdx.x * blockDim.x + threadIdx.x`, `col = id.x`.
_X_VARIABLE = re.compile(r"\b(\w+)\s*=\s*[^;,=]*?(?:threadIdx\.x|\b(?:id|tid|gid|DTid|dtid|dispatchThreadID|"
                         r"dispatch_id|global_id|threadID|gi)\.x\b|SV_DispatchThreadID\.x)")
_ASSIGNMENT = re.compile(r"\b(\w+)\s*=(?!=)\s*([^;,]*)")
# A shared tile of A declared k-major, `As[BK][BM + 4]`, or named transposed (`AsT`, `As_t`, `At`).
_SHARED_A = re.compile(r"(?:__shared__|groupshared)[^;]*?\b(\w+)\s*\[\s*([^\]]*)\]\s*\[\s*([^\]]*)\]")


def _coalesced(source: str) -> bool:
    """Adjacent threads (x) touch adjacent elements: an x-derived variable is the contiguous index of a row-major
    n-indexed access, `C[row * N + col]` or `B[k * p.N + col]`."""
    names = set(_X_VARIABLE.findall(source))
    assignments = _ASSIGNMENT.findall(source)
    for _ in range(3):  # `tx = threadIdx.x; col = blockIdx.x * TILE + tx;`: derived names too
        names |= {lhs for lhs, rhs in assignments if any(re.search(rf"\b{re.escape(n)}\b", rhs) for n in names)}
    return any(re.search(r"\[[^\[\]]*\bN\s*\+\s*" + re.escape(name) + r"\s*\]", source) for name in names)


def _a_tile_transposed(source: str) -> bool:
    for name, first, second in _SHARED_A.findall(source):
        if not re.fullmatch(r"(?:s|sh|smem|tile)?_?A(?:s|sh|_s|_smem|_tile|tile)?(_?[tT])?|a_?(?:s|sh|smem|tile)",
                            name):
            continue
        named_transposed = re.fullmatch(r".*_?[tT]", name) is not None  # AsT, As_t, At
        if named_transposed or ("K" in first and "M" in second and "K" not in second):
            return True
    return False
