"""Every code example in the catalog compiles for every backend its text claims (CUDA with NVRTC, HLSL with the
HLSL compiler on PATH), so an LLM is never taught code that does not build.

Convention (peak_mcp.catalog.rendering.code_examples): a fence is tagged with its language, ```cuda, ```hlsl
or ```text.
```cuda kernel / ```hlsl kernel is a whole kernel file with its `peak:` line, compiled as is. An untagged-role
cuda/hlsl block is a fragment: it compiles inside the harness below, which declares the names it uses (placed at
file scope for helpers, in the kernel body for statements). ```text is pseudo-code, skipped with the reason
recorded here. A cuda fence serves the cuda and hip backends, an hlsl fence the hlsl backend.

Each fence is compiled as a brief shows it: the body rendered for the backend (catalog.render_body, which leaves out
fences for other backends), in every dtype the text applies to on that backend (f32, f16, bf16 for CUDA/HIP; f32,
f16 for HLSL), with A and B of that dtype: code that only builds for float inputs fails here.

Texts for the row problems (softmax, rmsnorm, row_sum; not matmul) compile in a row harness: the element type T
and pointers x, w, y with ROWS and COLS. Their cuda fences are compiled for HIP too, in HIP's spelling of the
harness (HIP headers, hip_bfloat16): those fences are written to build as both (`#if defined(__HIPCC__)` where
the two differ), so a HIP brief never shows code that HIP rejects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from peak_mcp.backends import hlsl as hlsl_backend
from peak_mcp.backends.base import CompileFailed
from peak_mcp.backends.registry import BACKENDS, launch_spec
from peak_mcp.catalog.rendering import (
    FENCE_BACKENDS,
    TUNING_HEADING,
    TUNING_PLATFORMS,
    CodeExample,
    code_examples,
    render_body,
    split_section,
)
from peak_mcp.catalog.transformations import Catalog, builtin_transformations_dir
from peak_mcp.problems.file_calls import ROW_TRAITS
from peak_mcp.problems.matmul import Matmul


@dataclass(frozen=True)
class Harness:
    """Where a fragment goes and what surrounds it. `{fence0}` etc. stand for the same text's other fences."""

    place: str = "body"  # "body": statements inside the kernel; "file": helpers at file scope
    file: str = ""  # file-scope declarations before the kernel
    before: str = ""  # kernel-body statements before the fragment
    after: str = ""  # kernel-body statements after it
    buffers: str = ""  # HLSL: bindings other than the default StructuredBuffer<float> A, B, RW C
    numthreads: str = "256, 1, 1"  # HLSL


RB2D_DECLS = """constexpr int BM = 128, BN = 128, BK = 8;
__shared__ __align__(16) float As[BK][BM + 4];
__shared__ __align__(16) float Bs[BK][BN];
const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16, m0 = blockIdx.y * BM, n0 = blockIdx.x * BN, k0 = 0;"""
HLSL_ACCS = ", ".join(f"c{i}{j} = 0" for i in range(8) for j in range(2))

HARNESSES: dict[tuple[str, int], Harness] = {
    ("cuda-cp-async", 0): Harness(place="file", before="""
__shared__ __align__(16) float s[256];
cp_async4(&s[threadIdx.x], A + threadIdx.x, (int)threadIdx.x < K);
cp_async16(&s[0], A, 16);
cp_async_commit(); cp_async_wait<0>(); __syncthreads();""", after="C[threadIdx.x] = s[threadIdx.x];"),
    ("cuda-cp-async", 1): Harness(file="{fence0}", before="""
constexpr int STAGES = 3; const int T = (K + 15) / 16;
__shared__ __align__(16) float tile[STAGES][16];
auto issue_tile = [&](int t, int s) {
    cp_async4(&tile[s][threadIdx.x % 16], A + t * 16 + threadIdx.x % 16, t * 16 + (int)threadIdx.x % 16 < K); };
float acc = 0.f;
auto compute = [&](int s) { acc += tile[s][threadIdx.x % 16]; };""", after="C[threadIdx.x] = acc;"),
    ("double-buffering", 0): Harness(before="""
constexpr int BK = 16; const int T = (K + BK - 1) / BK;
__shared__ float As[2][BK];
float ra = 0.f, acc = 0.f;
auto fetch = [&](int k0) { ra = k0 + (int)threadIdx.x < K ? static_cast<float>(A[k0 + threadIdx.x]) : 0.f; };
auto stash = [&](int stage) { if (threadIdx.x < BK) As[stage][threadIdx.x] = ra; };
auto compute = [&](int cur) { acc += As[cur][threadIdx.x % BK]; };""", after="C[threadIdx.x] = acc;"),
    ("double-buffering", 1): Harness(file="""#define BK 16
groupshared float As[2][BK];
static float ra = 0.0, acc = 0.0;
static uint lane = 0;
void fetch(uint k0) { ra = 0.0; if (k0 + lane < p.K) ra = float(A[k0 + lane]); }
void stash(uint stage) { if (lane < BK) As[stage][lane] = ra; }
void compute(uint cur) { acc += As[cur][lane % BK]; }""", before="lane = gtid.x; const uint T = (p.K + BK - 1) / BK;",
                                     after="C[gtid.x] = acc;"),
    ("grid-rasterization", 1): Harness(file="#define BM 128\n#define BN 128\n#define GROUP_M 8",
                                       after="if (m0 < p.M && n0 < p.N) C[0] = float(m0 + n0);"),
    ("register-blocking-1d", 1): Harness(numthreads="512, 1, 1", file="""#define BK 8
#define TM 8
#define BN 64
groupshared float As[64][BK];
groupshared float Bs[BK][BN];""", before="""
const uint tid = gtid.x, threadRow = tid / BN, threadCol = tid % BN;
float acc[TM];
for (uint z = 0; z < TM; ++z) acc[z] = 0.0;""", after="for (uint j = 0; j < TM; ++j) C[j * 512 + tid] = acc[j];"),
    ("grid-rasterization", 0): Harness(before="constexpr int BM = 128, BN = 128, GROUP_M = 8;",
                                       after="if (m0 < M && n0 < N) C[0] = (float)(m0 + n0);"),
    ("hlsl-16bit-types", 0): Harness(place="file", buffers="""[[vk::binding(0)]] ByteAddressBuffer A;
[[vk::binding(1)]] ByteAddressBuffer B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;""", after="C[gtid.x] = loadA(gtid.x) + loadB(gtid.x);"),
    ("hlsl-groupshared-tiling", 0): Harness(numthreads="16, 16, 1", file="""#define T 16
groupshared float As[T][T];
groupshared float Bs[T][T];""", before="uint row = gid.y * T + gtid.y, col = gid.x * T + gtid.x;"),
    ("hlsl-wave-tiling", 0): Harness(after="C[gtid.x] = 1.0;"),
    ("mma-sync-ptx", 0): Harness(place="file", file="#include <cuda_fp16.h>", before="""
__shared__ __align__(16) __half s[16 * 16];
unsigned a[4], b[2] = {0u, 0u}; float d[4] = {0.f, 0.f, 0.f, 0.f};
ldsm_x4(a[0], a[1], a[2], a[3], &s[(threadIdx.x % 16) * 16]);
mma16816(d, a, b);""", after="C[threadIdx.x] = d[0];"),
    ("three-xtf32", 0): Harness(place="file", before="""
__shared__ __align__(16) float s[16 * 8];
s[threadIdx.x % 128] = A[threadIdx.x % 128];
__syncthreads();
unsigned raw[4], hi[4], lo[4], b[2] = {0u, 0u};
float d[4] = {0.f, 0.f, 0.f, 0.f};
ldsm_x4(raw, (unsigned)__cvta_generic_to_shared(&s[(threadIdx.x % 16) * 8 + (threadIdx.x / 16 % 2) * 4]));
for (int r = 0; r < 4; ++r) split_tf32(raw[r], hi[r], lo[r]);
mma1688(d, hi, b);""", after="C[threadIdx.x] = d[0] + __uint_as_float(lo[0]);"),
    ("three-xtf32", 1): Harness(file="{fence0}", before="""
constexpr int BK = 32, LDA = BK + 4, LDB = 128 + 8, WM = 64, WN = 32, MI = WM / 16, NI = WN / 8;
__shared__ __align__(16) float As[128][LDA];
__shared__ __align__(16) float Bs[BK][LDB];
const unsigned sAs = (unsigned)__cvta_generic_to_shared(&As[0][0]);
const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, wm = warp / 4, wn = warp % 4, g = lane / 4, t = lane % 4;
float acc[MI][NI][4] = {};""", after="C[threadIdx.x] = acc[0][0][0] + acc[MI - 1][NI - 1][3];"),
    ("register-blocking-1d", 0): Harness(before="""
constexpr int BK = 8, TM = 8, BN = 64;
__shared__ float As[64][BK];
__shared__ float Bs[BK][BN];
const int threadRow = threadIdx.x / BN, threadCol = threadIdx.x % BN;
float acc[TM] = {};""", after="for (int i = 0; i < TM; ++i) C[i * 256 + threadIdx.x] = acc[i];"),
    ("register-blocking-2d", 0): Harness(before=RB2D_DECLS, after="C[tid] = As[0][tid % BM] + Bs[0][tid % BN];"),
    ("register-blocking-2d", 1): Harness(before=RB2D_DECLS + "\nfloat acc[8][8] = {};",
                                         after="C[tid] = acc[0][0] + acc[7][7];"),
    ("register-blocking-2d", 2): Harness(file="""#define BM 128
#define BN 128
#define BK 8
groupshared float4 As[BK][BM / 4 + 1];
groupshared float4 Bs[BK][BN / 4];""", before=f"""
uint tid = gtid.x, tx = tid % 16, ty = tid / 16, m0 = gid.y * BM, n0 = gid.x * BN;
float4 {HLSL_ACCS};
for (uint k0 = 0; k0 < p.K; k0 += BK) {{""", after="}\nC[tid] = c00.x + c71.w;"),
    ("shared-memory-tiling", 0): Harness(before="""
constexpr int T = 16;
__shared__ float As[T][T], Bs[T][T];
const int tx = threadIdx.x, ty = threadIdx.y, row = blockIdx.y * T + ty, col = blockIdx.x * T + tx;
float acc = 0.f;"""),
    ("tensor-cores", 0): Harness(file="#include <mma.h>\n#include <cuda_fp16.h>\nusing namespace nvcuda;", before="""
__shared__ __align__(32) half As[128][32 + 8];
__shared__ __align__(32) half Bs[32][128 + 8];
const int warp = threadIdx.x / 32, wm = warp / 4, wn = warp % 4;
wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa[4];
wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> fb[2];
wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];""",
                                 after="wmma::store_matrix_sync(C, acc[0][0], 16, wmma::mem_row_major);"),
    ("vectorized-loads", 0): Harness(place="file", before="float4 v = load4(A, blockIdx.y, threadIdx.x * 4, M, K, K, "
                                                         "(K % 4) == 0);", after="C[threadIdx.x] = v.x + v.w;"),
    ("vectorized-loads", 1): Harness(place="file", buffers="[[vk::binding(0)]] StructuredBuffer<float> A;",
                                     before="storeC4(gid.y, gtid.x * 4, loadB4(gid.y, gtid.x * 4));"),
}

# Row texts: helpers their fences assume from other texts (a warp butterfly, a block sum, the vector unpack).
ROW_WARP_SUM = """__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1)
#if defined(__HIPCC__)
        v += __shfl_xor(v, o, 32);
#else
        v += __shfl_xor_sync(0xffffffffu, v, o);
#endif
    return v;
}"""
ROW_BLOCK_SUM = """__device__ __forceinline__ float block_sum(float v, float* red) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    return warp_sum(lane < BLOCK / 32 ? red[lane] : 0.0f);
}"""
ROW_UNPACK = """#define VEC ((int)(16 / sizeof(T)))
__device__ __forceinline__ void unpack(const uint4& raw, float (&f)[VEC]) {
    const T* e = reinterpret_cast<const T*>(&raw);
    for (int j = 0; j < VEC; ++j) f[j] = static_cast<float>(e[j]);
}"""
ROW_PACK = """__device__ __forceinline__ uint4 pack(const float (&f)[VEC]) {
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
    for (int j = 0; j < VEC; ++j) e[j] = T(f[j]);
    return raw;
}"""
ROW_X0 = "const float x0 = threadIdx.x < COLS ? static_cast<float>(x[threadIdx.x]) : 0.0f;"

HARNESSES.update({
    ("row-per-block-reduction", 0): Harness(place="file", file="#define BLOCK 256", before=f"""
__shared__ float red[BLOCK];
{ROW_X0}""", after="y[threadIdx.x] = T(block_reduce<true>(x0, red) + block_reduce<false>(x0, red));"),
    ("row-per-block-reduction", 1): Harness(place="file", file="#define NT 256", after="""
y[tid] = group_reduce(float(x[tid]), tid, false) + group_reduce(float(x[tid]), tid, true);"""),
    ("row-per-block-reduction", 2): Harness(file="#define BLOCK 256\n{fence0}", before="__shared__ float red[BLOCK];"),
    ("warp-shuffle-reduction", 0): Harness(place="file", file="#define BLOCK 256", before=f"""
__shared__ float red_max[BLOCK / 32], red_sum[BLOCK / 32];
{ROW_X0}""", after="y[threadIdx.x] = T(block_reduce<true>(x0, red_max) + block_reduce<false>(x0, red_sum));"),
    ("vectorized-row-access", 0): Harness(place="file", before="""
float f[VEC];
unpack(reinterpret_cast<const uint4*>(x)[threadIdx.x], f);""",
                                          after="reinterpret_cast<uint4*>(y)[threadIdx.x] = pack(f);"),
    ("vectorized-row-access", 1): Harness(file="#define BLOCK 256\n{fence0}",
                                          after="if (has_edge) y[base + edge] = T(acc);"),
    ("online-softmax", 0): Harness(place="file", before=f"""
{ROW_X0}
float m = LOWEST, s = 0.0f, f[1] = {{x0}};
online(m, s, f, 1);
merge(m, s, 1.0f, 2.0f);""", after="y[threadIdx.x] = T(m + s);"),
    ("online-softmax", 1): Harness(file=f"#define BLOCK 256\n#define EPT 32\n{ROW_UNPACK}\n"
                                        "#define VPT (EPT / VEC)\n{fence0}",
                                   before="""
const size_t base = (size_t)blockIdx.x * COLS;
const int tid = threadIdx.x, nvec = COLS / VEC;
const uint4* xv = reinterpret_cast<const uint4*>(x + base);""",
                                   after="y[base + tid] = T(m + s + (fits ? 1.0f : 0.0f));"),
    ("online-softmax", 2): Harness(file="""#define NT 256
float group_reduce(float v, uint tid, bool is_max) { return is_max ? WaveActiveMax(v) : WaveActiveSum(v); }""",
                                   before="const uint base = gid.x * p.COLS;",
                                   after="y[tid] = row_max * inv;"),
    ("row-per-warp", 0): Harness(file=f"#define WARPS 8\n{ROW_WARP_SUM}"),
    ("persistent-rows", 0): Harness(file=f"#define BLOCK 256\n{ROW_WARP_SUM}\n{ROW_BLOCK_SUM}"),
    ("fast-exp2", 0): Harness(place="file", after="""
if (threadIdx.x < COLS) y[threadIdx.x] = T(exp2_ftz(static_cast<float>(x[threadIdx.x]) * 1.4426950408889634f));"""),
    ("cache-eviction-hints", 0): Harness(place="file", file="#define HINT 2", after="""
const uint4* xv = reinterpret_cast<const uint4*>(x);
const uint4 a = load_once(xv + threadIdx.x), b = load_kept(reinterpret_cast<const uint4*>(w) + threadIdx.x);
store_once(reinterpret_cast<uint4*>(y) + threadIdx.x, make_uint4(a.x ^ b.x, a.y, a.z, a.w));"""),
    ("cache-eviction-hints", 1): Harness(file=f"#define BLOCK 256\n#define EPT 32\n#define HINT 2\n{ROW_UNPACK}\n"
                                              f"{ROW_PACK}\n#define VPT (EPT / VEC)\n" "{fence0}", before="""
const size_t base = (size_t)blockIdx.x * COLS;
const int tid = threadIdx.x, head = 0, nvec = COLS / VEC;
const bool fits = nvec <= VPT * BLOCK;
const float r = 0.5f;
const uint4* xv = reinterpret_cast<const uint4*>(x + base);
uint4* yv = reinterpret_cast<uint4*>(y + base);
uint4 raw[VPT];
for (int k = 0; k < VPT; ++k)
    raw[k] = load_once(xv + min(tid + k * BLOCK, max(nvec - 1, 0)));"""),
    ("hlsl-wave-reduction", 0): Harness(place="file", file="#define NT 256", after="""
y[tid] = group_reduce(float(x[tid]), tid, false) + group_reduce(float(x[tid]), tid, true);"""),
})

# The texts for the other traits (elementwise, scan, pooling, fused_epilogue): device-function templates at file
# scope, instantiated from the matmul harness's A (the element type T) and C (as the output of type T).
TRAIT_HELPERS = """template <typename P> struct elem_of;
template <typename T> struct elem_of<const T*> { typedef T type; };
template <typename T> __device__ __forceinline__ T* out_as(const T*, float* c) { return reinterpret_cast<T*>(c); }"""
HARNESSES.update({
    ("elementwise-grid-stride", 0): Harness(place="file", file=TRAIT_HELPERS,
                                            before="map_grid_stride(A, out_as(A, C), (long long)M * N);"),
    ("parallel-scan", 0): Harness(place="file", file=TRAIT_HELPERS,
                                  before="(void)scan_segment<256, 4>(A, out_as(A, C), 0, N, 0.0f);"),
    ("parallel-scan", 1): Harness(place="file", file=f"{TRAIT_HELPERS}\n{{fence0}}", before="""
__shared__ float s_sum;
const float total = 1.0f;
(void)scan_segment<256, 4>(A, out_as(A, C), 0, N, cluster_prefix(&s_sum, total));
__cluster_barrier_arrive();
__cluster_barrier_wait();"""),
    ("pooling-shared-window", 0): Harness(place="file", file=TRAIT_HELPERS,
                                          before="max_pool_tile<16, 16, 3, 2, 1>(A, out_as(A, C), M, N, K, K, 1);"),
    ("epilogue-fusion", 0): Harness(place="file", file=TRAIT_HELPERS, before="""
typedef elem_of<decltype(A)>::type E;
float acc[4][4] = {};
store_tile<4, 4>(out_as(A, C), acc, 0, 0, M, N, ScaleLeakyRelu<E>{B, 2.0f, 0.01f});"""),
})

PSEUDO_CODE: dict[tuple[str, int], str] = {
    ("edge-tile-specialization", 0): "control-flow outline: `…` stands for the compute step",
    ("hopper-wgmma", 0): "a schedule of PTX instructions per K step, not C++",
    ("hopper-tma-pipeline", 0): "annotation lines and a kernel signature, no body",
    ("hopper-tma-pipeline", 1): "the K loop as an outline over peak/hopper.cuh calls (tests/test_hopper_ladder.py "
                                "compiles the kernel it describes)",
    ("hopper-warp-specialization", 0): "annotation lines and a signature with `...` for the parameters",
    ("hopper-warp-specialization", 1): "producer and consumer loops as an outline over peak/hopper.cuh calls",
    ("attention-warp-specialized", 0): "the consumer loop as an outline over peak/hopper.cuh calls (the kernel it "
                                       "describes, examples/attention/cuda/6_warp_specialized.cu, compiles in "
                                       "tests/test_attention.py)",
    ("attention-warp-specialized", 1): "two helpers and the annotation lines of that kernel, which compiles there",
    ("hopper-persistent-gemm", 0): "annotation lines only",
    ("hopper-persistent-gemm", 1): "index arithmetic written as formulas",
    ("hopper-tma-multicast", 0): "annotation lines only",
    ("conv-implicit-gemm", 0): "the im2col index map as a loop outline (dot() stands for the channel loop)",
    ("conv-tensor-cores", 0): "one slice of the pipeline as an outline of steps, not C++",
}

CUDA_FILE = """// peak: entry=harness grid=(1, 1, 1) block=(256, 1, 1)
{headers}{file}
extern "C" __global__ void harness(const {T}* A, const {T}* B, float* C, int M, int N, int K) {{
{body}
}}
"""
HLSL_FILE = """// peak: entry=main groups=(1, 1, 1)
struct Params {{ uint M; uint N; uint K; }};
[[vk::push_constant]] ConstantBuffer<Params> p;
{buffers}
{file}
[numthreads({numthreads})]
void main(uint3 gtid : SV_GroupThreadID, uint3 gid : SV_GroupID) {{
{body}
}}
"""
HLSL_BUFFERS = """[[vk::binding(0)]] StructuredBuffer<{T}> A;
[[vk::binding(1)]] StructuredBuffer<{T}> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;"""

ROW_CUDA_FILE = """// peak: entry=harness grid=(1, 1, 1) block=(256, 1, 1)
{headers}typedef {T} T;
{file}
extern "C" __global__ void harness(const T* x, const T* w, T* y, int ROWS, int COLS) {{
{body}
}}
"""
ROW_HEADERS = {"cuda": "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n",
               "hip": "#include <hip/hip_runtime.h>\n#include <hip/hip_fp16.h>\n#include <hip/hip_bfloat16.h>\n"}
ROW_TYPES = {"cuda": {"f32": "float", "f16": "__half", "bf16": "__nv_bfloat16"},
             "hip": {"f32": "float", "f16": "__half", "bf16": "hip_bfloat16"}}
ROW_HLSL_FILE = """// peak: entry=main groups=(1, 1, 1)
struct Params {{ uint ROWS; uint COLS; }};
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<{T}> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;
{file}
[numthreads({numthreads})]
void main(uint3 gid : SV_GroupID, uint tid : SV_GroupIndex) {{
{body}
}}
"""

CATALOG = Catalog.load(builtin_transformations_dir())
EXAMPLES = {t.id: code_examples(t.body) for t in CATALOG.list()}
BACKEND_DTYPES = {"cuda": ("f32", "f16", "bf16"), "hip": ("f32", "f16", "bf16"), "hlsl": ("f32", "f16")}
CUDA_HEADERS = {"f32": "", "f16": "#include <cuda_fp16.h>\n", "bf16": "#include <cuda_bf16.h>\n"}
CUDA_TYPES = {"f32": "float", "f16": "__half", "bf16": "__nv_bfloat16"}
HLSL_TYPES = {"f32": "float", "f16": "half"}


def shown(text_id: str, backend: str) -> list[int]:
    """The numbers of the text's fences that a brief for `backend` shows."""
    rendered = [e.code for e in code_examples(render_body(CATALOG.get(text_id).body, backend))]
    return [n for n, example in enumerate(EXAMPLES[text_id]) if example.code in rendered]


CASES = [(t.id, n, backend, dtype) for t in CATALOG.list() for backend in t.backends for n in shown(t.id, backend)
         if backend in FENCE_BACKENDS.get(EXAMPLES[t.id][n].language, ())
         for dtype in BACKEND_DTYPES[backend] if t.for_dtype(dtype)]


def row_text(text_id: str) -> bool:
    """A text for the row problems only (its traits among ROW_TRAITS, or it names no matmul): its fences use the
    row harness."""
    t = CATALOG.get(text_id)
    if t.for_any_problem:
        return False
    return set(t.traits) <= ROW_TRAITS if t.traits else "matmul" not in t.problems


def wrap(text_id: str, n: int, example: CodeExample, dtype: str = "f32", backend: str = "cuda") -> str:
    """The compilable file for one example: itself when it is a whole kernel, else its harness around it."""
    if example.kernel:
        return example.code
    harness = HARNESSES[(text_id, n)]
    file = harness.file
    for i, other in enumerate(EXAMPLES[text_id]):
        file = file.replace(f"{{fence{i}}}", other.code)
    if harness.place == "file":
        file += "\n" + example.code
        body = f"{harness.before}\n{harness.after}"
    else:
        body = f"{harness.before}\n{example.code}\n{harness.after}"
    if row_text(text_id):
        if example.language == "hlsl":
            return ROW_HLSL_FILE.format(T=HLSL_TYPES[dtype], file=file, numthreads=harness.numthreads, body=body)
        return ROW_CUDA_FILE.format(headers=ROW_HEADERS[backend], T=ROW_TYPES[backend][dtype], file=file, body=body)
    if example.language == "hlsl":
        buffers = harness.buffers or HLSL_BUFFERS.format(T=HLSL_TYPES[dtype])
        return HLSL_FILE.format(buffers=buffers, file=file, numthreads=harness.numthreads, body=body)
    return CUDA_FILE.format(headers=CUDA_HEADERS[dtype], T=CUDA_TYPES[dtype], file=file, body=body)


@pytest.fixture(scope="module")
def compilers() -> dict[str, object]:
    from peak_mcp.backends import cuda as cuda_backend
    from peak_mcp.backends import hip as hip_backend

    return {"cuda": cuda_backend.CudaExecutor(None, arch="sm_90a"), "hlsl": hlsl_backend.open_executor(None),
            "hip": hip_backend.open_executor(None, hip_arch="sm_90a")}


@pytest.mark.parametrize(("text_id", "n", "backend", "dtype"), CASES,
                         ids=[f"{t}#{n}-{b}-{d}" for t, n, b, d in CASES])
def test_example_compiles(compilers: dict[str, object], text_id: str, n: int, backend: str, dtype: str) -> None:
    example = EXAMPLES[text_id][n]
    if backend not in BACKENDS:
        pytest.skip(f"no {backend} compiler in peak-mcp yet; the cuda build of this example stands for it")
    if backend == "hip" and example.language != "hip" and not row_text(text_id):
        pytest.skip("a cuda block: its cuda build stands for hip (HIP on NVIDIA compiles HIP headers only)")
    if backend == "hlsl" and hlsl_backend.find_compiler() is None:
        pytest.skip("no HLSL compiler on PATH (glslang-tools or dxc)")
    source = wrap(text_id, n, example, dtype, backend)
    # a whole kernel of a row text launches over the row problems' sizes
    spec = launch_spec(source, backend, (*Matmul.symbols, "ROWS", "COLS") if row_text(text_id) else Matmul.symbols)
    try:
        compilers[backend].compile(source, spec)  # type: ignore[attr-defined]
    except CompileFailed as exc:
        numbered = "\n".join(f"{i:4} {line}" for i, line in enumerate(source.splitlines(), start=1))
        pytest.fail(f"{text_id}, code block {n} (body line {example.line}) does not compile for {backend} {dtype}:\n"
                    f"{exc.log}\n--- the file compiled ---\n{numbered}")


def test_every_example_is_checked_or_has_a_recorded_reason() -> None:
    """A new fence must come with a harness (or be a whole kernel) or be pseudo-code with a reason; a fence's
    language must serve one of its text's backends; no harness outlives its fence."""
    seen = set()
    for t in CATALOG.list():
        for n, example in enumerate(EXAMPLES[t.id]):
            key = (t.id, n)
            seen.add(key)
            if example.language == "text":
                assert key in PSEUDO_CODE, f"{key}: a ```text block needs a reason in PSEUDO_CODE"
                continue
            assert example.language in FENCE_BACKENDS, f"{key}: untagged or unknown language {example.language!r}"
            assert set(FENCE_BACKENDS[example.language]) & set(t.backends), \
                f"{key}: a {example.language} example in a text for {t.backends}"
            assert example.kernel or key in HARNESSES, f"{key}: a fragment needs a harness in HARNESSES"
    assert set(HARNESSES) <= seen and set(PSEUDO_CODE) <= seen, (set(HARNESSES) | set(PSEUDO_CODE)) - seen
    assert len(CASES) >= 16


def test_a_broken_example_fails() -> None:
    """The harness does not hide errors: a fragment with a typo fails to compile."""
    from peak_mcp.backends import cuda as cuda_backend

    good = EXAMPLES["shared-memory-tiling"][0]
    broken = good.model_copy(update={"code": good.code.replace("As[ty][tx] =", "As[ty][tz] =")})
    source = wrap("shared-memory-tiling", 0, broken)
    with pytest.raises(CompileFailed, match="tz"):
        cuda_backend.CudaExecutor(None, arch="sm_90a").compile(
            source, launch_spec(source, "cuda", Matmul.symbols))


def test_a_broken_row_example_fails_in_both_spellings() -> None:
    """The row harness hides nothing either: a typo fails the CUDA and the HIP build."""
    from peak_mcp.backends import cuda as cuda_backend
    from peak_mcp.backends import hip as hip_backend

    good = EXAMPLES["row-per-warp"][0]
    broken = good.model_copy(update={"code": good.code.replace("warp_sum(acc)", "warp_summ(acc)")})
    executors = {"cuda": cuda_backend.CudaExecutor(None, arch="sm_90a"),
                 "hip": hip_backend.open_executor(None, hip_arch="sm_90a")}
    for backend, executor in executors.items():
        source = wrap("row-per-warp", 0, broken, "bf16", backend)
        assert ("hip_bfloat16" in source) == (backend == "hip")
        with pytest.raises(CompileFailed, match="warp_summ"):
            executor.compile(source, launch_spec(source, backend, Matmul.symbols))


@pytest.mark.parametrize("backend", ["cuda", "hip", "hlsl"])
def test_a_brief_shows_only_its_backends_code_and_tuning_lines(backend: str) -> None:
    """Rendered for a backend, a text carries no fence in another backend's language and no Tuning parameters
    line for another platform (no CUDA code or AMD lines in an HLSL brief)."""
    others = [p for p, serves in TUNING_PLATFORMS.items() if backend not in serves]
    for t in CATALOG.list(backend=backend):
        body = render_body(t.body, backend)
        for example in code_examples(body):
            assert not FENCE_BACKENDS.get(example.language) or backend in FENCE_BACKENDS[example.language], \
                f"{t.id}: a {example.language} block in a {backend} brief"
        _, tuning = split_section(body, TUNING_HEADING)
        for line in (tuning or "").splitlines():
            assert not any(line.startswith(f"- {p}") for p in others), f"{t.id}: {line!r} in a {backend} brief"
        assert body.count(f"{TUNING_HEADING}\n") <= 1, t.id
        assert "\x00" not in body, t.id
    if backend == "hlsl":  # its K loop has an HLSL example: no note about the CUDA one left out stands there
        step = render_body(CATALOG.get("double-buffering").body, "hlsl").split("3. Restructure", 1)[1]
        assert "left out" not in step.split("4. ", 1)[0] and "```hlsl" in step


@pytest.mark.parametrize("backend", ["cuda", "hip", "hlsl"])
def test_a_wrapped_tuning_bullet_for_another_platform_leaves_no_tail(backend: str) -> None:
    """A Tuning parameters bullet wrapped over lines goes whole or stays whole: an HLSL online-softmax brief once
    began its section with the NVIDIA bullet's second line (`// peak: where=BLOCK * EPT <= 16384`; ...)."""
    for t in CATALOG.list(backend=backend):
        _, tuning = split_section(render_body(t.body, backend), TUNING_HEADING)
        lines = (tuning or "").splitlines()
        for i, line in enumerate(lines):
            if line[:1].isspace() and line.strip():  # a continuation follows its bullet's first line
                assert i and (lines[i - 1].startswith("- ") or lines[i - 1][:1].isspace()), \
                    f"{t.id}: a tail in the {backend} section: {line!r}"
    _, tuning = split_section(render_body(CATALOG.get("online-softmax").body, "hlsl"), TUNING_HEADING)
    assert tuning.strip() == "- HLSL: `// peak: params NT=[256, 128, 512, 64]`.", tuning
    _, tuning = split_section(render_body(CATALOG.get("online-softmax").body, "cuda"), TUNING_HEADING)
    assert "BLOCK * EPT >= COLS keeps the row in registers." in tuning and "NT=" not in tuning


def test_a_hip_brief_keeps_the_tuning_lines_of_its_devices_vendor() -> None:
    body = CATALOG.get("shared-memory-tiling").body
    for arch, kept, left_out in (("gfx942", "- AMD CDNA", "- NVIDIA"), ("sm_90a", "- NVIDIA", "- AMD")):
        _, tuning = split_section(render_body(body, "hip", arch), TUNING_HEADING)
        assert kept in tuning and left_out not in tuning and "- HLSL" not in tuning, (arch, tuning)
    _, both = split_section(render_body(body, "hip"), TUNING_HEADING)  # device unknown: both vendors
    assert "- AMD CDNA" in both and "- NVIDIA" in both


# Spellings of one backend that a brief for another must not carry, unless in a sentence about that backend: CUDA's
# indices, barriers, qualifiers, pragmas and matmul/row ABI (`int M`, HLSL passes uint push constants) and its
# annotation keys (grid=/block=/shared=; HLSL's is groups=), and HLSL's system values, barriers, wave intrinsics,
# attributes, buffers and push constants.
CUDA_SPELLINGS = re.compile(
    r"blockIdx|threadIdx|blockDim|gridDim|__shfl|__syncthreads|__syncwarp|__shared__|__launch_bounds__|__restrict__"
    r"|__ldg|__global__|__device__|__forceinline__|#pragma unroll|warpSize|reinterpret_cast|cudaFuncSetAttribute|<<<"
    r"|\bint (?:ROWS|COLS|M|N|K)\b|\b(?:grid|block|shared)=|\((?:const )?\w+\*\)")
HLSL_SPELLINGS = re.compile(
    r"SV_|GroupMemoryBarrier|DeviceMemoryBarrier|AllMemoryBarrier|groupshared|\bWave[A-Z]\w*"
    r"|\bp\.(?:ROWS|COLS|M|N|K)\b|\[numthreads|\[unroll|\[loop\]|ByteAddressBuffer|StructuredBuffer|push_constant"
    r"|vk::|\buint3\b|min16float|float16_t|\bgroups=")
# A sentence that names the other backend may use its spellings ("`__syncthreads()` in CUDA, ... in HLSL").
OTHER_BACKEND = {"hlsl": (CUDA_SPELLINGS, re.compile(r"CUDA|HIP")), "cuda": (HLSL_SPELLINGS, re.compile("HLSL")),
                 "hip": (HLSL_SPELLINGS, re.compile("HLSL"))}


def _sentences(body: str) -> list[str]:
    """The prose of a rendered brief in sentences (fenced code left out: a fence in another backend's language is
    already dropped by render_body, see test_a_brief_shows_only_its_backends_code_and_tuning_lines)."""
    prose = re.sub(r"^[ \t]*```.*?^[ \t]*```[ \t]*$", "", body, flags=re.DOTALL | re.MULTILINE)
    return [s for s in re.split(r"(?<=[.:;])\s+|\n(?=\s*(?:- |\d+\. |## ))", prose) if s.strip()]


@pytest.mark.parametrize("text_id", sorted(EXAMPLES))
def test_texts_say_only_what_is_true_on_each_backend(text_id: str) -> None:
    """An HLSL softmax brief said "Keep unchanged – The ABI: buffers then `int ROWS, int COLS`" (HLSL passes uint
    push constants) and gave steps in blockIdx/threadIdx, and HLSL matmul briefs told the agent to declare
    `__shared__` tiles and call `__syncthreads()`: rendered for each backend it claims, a text has no other
    backend's spelling outside a sentence naming that backend (in an HLSL brief, CUDA or HIP; in a CUDA or HIP
    brief, HLSL), nor in its title and summary, which listings and briefs show to every backend. Items labelled
    `CUDA/HIP:` or `HLSL:` go only to those backends' briefs."""
    t = CATALOG.get(text_id)
    wrong = [(backend, " ".join(sentence.split())) for backend in t.backends
             for spelling, about in [OTHER_BACKEND[backend]]
             for sentence in [t.title, t.summary, *_sentences(render_body(t.body, backend))]
             if spelling.search(sentence) and not about.search(sentence)]
    assert not wrong, wrong


def test_row_and_matmul_briefs_give_each_backend_its_own_steps() -> None:
    hlsl_rows = [t for t in CATALOG.list(backend="hlsl") if row_text(t.id)]
    assert {"row-per-block-reduction", "online-softmax", "hlsl-wave-reduction"} <= {t.id for t in hlsl_rows}
    block = CATALOG.get("row-per-block-reduction").body
    hlsl, cuda = render_body(block, "hlsl"), render_body(block, "cuda")
    assert "`int ROWS, int COLS`" not in hlsl and "The ABI as the brief gives it" in hlsl
    assert "2. Each thread strides over the row" in hlsl and "for (uint c = tid; c < p.COLS; c += NT)" in hlsl
    assert "for (int c = threadIdx.x; c < COLS; c += BLOCK)" in cuda and "SV_GroupIndex" not in cuda
    assert "0.29×" in hlsl and "0.29×" not in cuda  # lavapipe's measurement is said where it applies
    coalesced = CATALOG.get("coalesced-access").body
    hlsl, cuda = render_body(coalesced, "hlsl"), render_body(coalesced, "cuda")
    assert "- HLSL: bindings 0, 1, 2, the push-constant block `p`" in hlsl and 'extern "C"' not in hlsl
    assert 'extern "C" __global__' in cuda and "push-constant" not in cuda
    # A step that gives both backends' code shows each brief its own, with no "left out" note in its place.
    for text_id in ("register-blocking-1d", "register-blocking-2d", "grid-rasterization", "double-buffering"):
        for backend in CATALOG.get(text_id).backends:
            assert "left out of this" not in render_body(CATALOG.get(text_id).body, backend), (text_id, backend)
    one_d = render_body(CATALOG.get("register-blocking-1d").body, "hlsl")
    assert "[numthreads(512, 1, 1)]" in one_d and "GroupMemoryBarrierWithGroupSync();" in one_d
    assert "6. " not in one_d.split("## Keep unchanged")[0]  # no step left that only said "HLSL: ..."


def test_labelled_items_render_for_their_backends_only() -> None:
    from peak_mcp.catalog.rendering import drop_other_backends

    body = """## What to do

1. Common step.
2. CUDA/HIP: a CUDA step
   ```cuda
   int a = threadIdx.x;

   int b = a;
   ```
3. HLSL (groupshared): an HLSL step.
   - HLSL: a nested HLSL line.
4. Last step, with
   - CUDA: a CUDA-only bullet
     that wraps;
   - HIP: a HIP-only bullet.

**B. A second list.**
1. Starts again.

## Pitfalls
- HLSL: an HLSL pitfall.
- A common one."""
    cuda = drop_other_backends(body, "cuda")
    assert "1. Common step.\n2. CUDA/HIP: a CUDA step" in cuda and "HLSL" not in cuda and "HIP-only" not in cuda
    assert "3. Last step, with\n   - CUDA: a CUDA-only bullet\n     that wraps;\n\n**B." in cuda
    assert "1. Starts again." in cuda and "- A common one." in cuda
    hlsl = drop_other_backends(body, "hlsl")
    assert "threadIdx" not in hlsl and "int b" not in hlsl and "CUDA" not in hlsl
    assert "1. Common step.\n2. HLSL (groupshared): an HLSL step.\n   - HLSL: a nested HLSL line.\n3. Last step" in hlsl
    assert "- HLSL: an HLSL pitfall.\n- A common one." in hlsl
    assert drop_other_backends(body, "hip").count("HIP-only") == 1
