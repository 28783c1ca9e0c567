// peak/hopper.cuh: device-only helpers for Hopper (sm_90a) GEMM kernels: mbarriers, TMA tile copies, wgmma
// descriptors and instructions, register reallocation, clusters, and a SIMT fallback for sizes TMA cannot map.
// NVRTC-compatible (no cuda.h, no host code). Every function is a thin wrapper over one documented PTX sequence;
// addresses of shared memory are 32-bit shared-window addresses (smem_addr), never generic pointers, unless noted.
// Kernels include it as `#include <peak/hopper.cuh>`; the server passes TMA descriptors as TensorMap parameters.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace peak {

// The CUtensorMap the server encodes (opaque, 128 bytes, 64-byte aligned). Declare kernel parameters as
// `const __grid_constant__ peak::TensorMap mapA`: the TMA unit reads it from parameter space by generic address.
struct alignas(64) TensorMap {
    unsigned long long opaque[16];
};

// True when the server encoded this map; false when it passed 128 zero bytes (TMA cannot address the buffer at this
// size, e.g. a 16-bit row pitch that is not a multiple of 16 bytes): the kernel must take its fallback path then.
__device__ __forceinline__ bool tma_usable(const TensorMap& map)
{
    unsigned long long any = 0;
#pragma unroll
    for (int i = 0; i < 16; ++i) any |= map.opaque[i];
    return any != 0;
}

// 32-bit shared-window address of a generic pointer into __shared__ memory (what every shared operand below takes).
__device__ __forceinline__ unsigned smem_addr(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Order this thread's earlier generic-proxy shared-memory accesses before later async-proxy ones (wgmma operand
// reads, TMA): needed when threads, not TMA, wrote a tile that wgmma then reads or a TMA store then copies out.
__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- mbarriers (64-bit, 8-byte aligned, in shared memory) ------------------------------------------------------

// Initialise the barrier at `bar` to expect `count` arrivals per phase. One thread, before any use; follow with
// mbar_init_fence() and a block (or cluster) barrier so other threads, the TMA unit and peer CTAs see it.
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Make preceding mbar_init()s visible to the async proxy (TMA complete_tx) and to the cluster.
__device__ __forceinline__ void mbar_init_fence()
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    fence_proxy_async();
}

// One arrival that also announces `bytes` more bytes of asynchronous copies (TMA) before the phase may complete.
// The producer calls it once per stage fill, with the total bytes every copy into this CTA's stage will deliver
// (a TMA box always delivers its full size, zero-filled out of bounds), before or after issuing the copies.
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// A plain arrival on this CTA's barrier (e.g. a consumer warp releasing a stage).
__device__ __forceinline__ void mbar_arrive(unsigned bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// An arrival on the barrier at the same shared offset `bar` in cluster CTA `cta` (may be this CTA): a consumer tells
// a peer's producer that it has finished reading a multicast stage. Default (.release.cta) semantics: a stage release
// orders nothing but reads that wgmma_wait has already retired. (With .release.cluster, and one lane arriving in
// both CTAs, the clustered ladder step ran at 40% of cuBLAS instead of 96% on an H100.)
__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar, unsigned cta)
{
    asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n"
                 ::"r"(bar), "r"(cta) : "memory");
}

// Block until the phase with parity `parity` (0 or 1) of the barrier has completed. A stage used for the n-th time
// (n = 0, 1, ...) waits for parity n & 1. try_wait suspends in hardware for a while, so the loop does not spin hot.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity)
{
    unsigned done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

// ---- TMA (cp.async.bulk.tensor) --------------------------------------------------------------------------------

// Ask the TMA unit to cache the descriptor early (optional; one thread, at kernel start).
__device__ __forceinline__ void tma_prefetch(const TensorMap& map)
{
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(&map) : "memory");
}

// Copy one box of a 2-D tensor map into shared memory at `dst` (aligned to the swizzle span, 1024 bytes for
// 128-byte swizzle), completing `bytes = box size` on barrier `bar`. Coordinates are element indices, innermost
// first: for a row-major matrix, x = column, y = row of the box's first element. Out-of-range parts are zero-filled.
// Issued by one thread.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TensorMap& map, unsigned bar, int x, int y)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], "
                 "[%2];\n" ::"r"(dst), "l"(&map), "r"(bar), "r"(x), "r"(y) : "memory");
}

// The same for a 4-D tensor map (e.g. B x H x S x D attention operands): coordinates innermost first, x = the
// innermost index (a column), y, z, w the outer ones; each dimension is bounded by its own extent, so a box that
// runs past S is zero-filled rather than reading the next head.
__device__ __forceinline__ void tma_load_4d(unsigned dst, const TensorMap& map, unsigned bar, int x, int y, int z,
                                            int w)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, "
                 "%5, %6}], [%2];\n" ::"r"(dst), "l"(&map), "r"(bar), "r"(x), "r"(y), "r"(z), "r"(w) : "memory");
}

// Copy one box from shared memory at `src` (laid out as tma_load_4d would write it, swizzle included; 128-byte
// aligned, 1024 with the 128-byte swizzle) to a 4-D tensor map at element coordinates (x, y, z, w), innermost
// first; parts of the box outside the tensor are not written. One thread issues it, after every writer of the box
// has run fence_proxy_async() and a barrier; the copy joins this thread's bulk group (bulk_commit), and `src` may be
// written again once bulk_wait_read says so.
__device__ __forceinline__ void tma_store_4d(const TensorMap& map, unsigned src, int x, int y, int z, int w)
{
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n"
                 ::"l"(&map), "r"(src), "r"(x), "r"(y), "r"(z), "r"(w) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Wait until at most N of this thread's committed bulk groups still read shared memory (their sources are free).
template <int N> __device__ __forceinline__ void bulk_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

// Wait until at most N of this thread's bulk groups are incomplete (their global writes done, as this thread sees
// them; other threads need a fence and a barrier after it). Before a block exits, so no copy outlives its source.
template <int N> __device__ __forceinline__ void bulk_wait()
{
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// The same box delivered to the same shared offset `dst` in every cluster CTA whose bit is set in `cta_mask`, each
// copy completing its bytes on the barrier at offset `bar` in that CTA. Every receiving CTA's producer must have
// announced those bytes (mbar_arrive_expect_tx) for its own barrier, and the issuing CTA must know that every
// receiver has freed the stage (a cluster-wide empty barrier, mbar_arrive_cluster).
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const TensorMap& map, unsigned bar, int x, int y,
                                                      unsigned short cta_mask)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
                 "[%0], [%1, {%3, %4}], [%2], %5;\n"
                 ::"r"(dst), "l"(&map), "r"(bar), "r"(x), "r"(y), "h"(cta_mask) : "memory");
}

// ---- wgmma (warpgroup MMA, 128 threads) ------------------------------------------------------------------------

// Shared-memory matrix descriptor for a tile stored with the 128-byte swizzle (what TMA writes with swizzle=128):
// rows of 128 bytes, 16-byte chunk c of row r at chunk c ^ (r & 7), 8-row groups 1024 bytes apart. `addr` is the
// operand's first element (its 8-row group 1024-byte aligned; moving along the swizzled 128-byte row, e.g. +32
// bytes per k16 step of a K-major operand, is allowed). K-major operand (A of row-major A, trans 0): lbo unused
// (pass 16), sbo = 1024. MN-major operand (row-major B, trans 1): lbo = bytes between 64-element panels of
// N (rows x 128 bytes), sbo = 1024 (the next 8 k-rows).
__device__ __forceinline__ unsigned long long wgmma_desc_sw128(unsigned addr, unsigned lbo, unsigned sbo)
{
    return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) |
           (static_cast<unsigned long long>(lbo >> 4) << 16) | (static_cast<unsigned long long>(sbo >> 4) << 32) |
           (1ull << 62);
}

// Before the first wgmma of a batch: orders the accumulator registers' earlier accesses before the async MMA.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

// Close the wgmma batch issued since the last commit into one group.
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

// Wait until at most N committed groups are still running; their accumulators and shared operands are then free.
template <int N> __device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// d (64 x N, f32, the warpgroup's m64nN fragment) = A(64x16, K-major, desc_a) * B(16xN, MN-major, desc_b)
// + (scale_d ? d : 0). All 128 threads of the warpgroup execute it, between wgmma_fence() and wgmma_commit().
// Fragment layout: warp w = (thread % 128) / 32, g = lane / 4, q = lane % 4: d[4j + 2h + e] is row 16w + g + 8h,
// column 8j + 2q + e (j < N / 8; h, e < 2).
// The instances differ in name, N, the input type and B's major-ness (TRANS_B) only, so one macro writes them: the
// accumulators as "+f" operands %0 .. %(N/2 - 1), then desc_a, desc_b and scale_d. Each instance also gets a
// type-dispatch overload without the suffix, its last argument a T (__half or __nv_bfloat16), for kernels written
// once over T: wgmma_m64n128k16(d, a, b, 1, T()).
#define PEAK_CTYPE_f16 __half
#define PEAK_CTYPE_bf16 __nv_bfloat16
#define PEAK_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                   "+f"(d[i + 6]), "+f"(d[i + 7])
#define PEAK_D32 PEAK_D8(0), PEAK_D8(8), PEAK_D8(16), PEAK_D8(24)
#define PEAK_D64 PEAK_D32, PEAK_D8(32), PEAK_D8(40), PEAK_D8(48), PEAK_D8(56)
#define PEAK_D128 PEAK_D64, PEAK_D8(64), PEAK_D8(72), PEAK_D8(80), PEAK_D8(88), PEAK_D8(96), PEAK_D8(104), \
                  PEAK_D8(112), PEAK_D8(120)
#define PEAK_R32 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define PEAK_R64 PEAK_R32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define PEAK_R128 PEAK_R64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define PEAK_WGMMA(NAME, N, TYPE, REGS, ACC, A, B, SCALE, TRANS_B)                                            \
    __device__ __forceinline__ void NAME##_m64n##N##k16_##TYPE(float (&d)[N / 2], unsigned long long desc_a,         \
                                                               unsigned long long desc_b, int scale_d)               \
    {                                                                                                               \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE ", 0;\n"                                             \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #TYPE "." #TYPE " {" REGS "}, " A ", " B       \
                     ", p, 1, 1, 0, " #TRANS_B ";\n}\n"                                                               \
                     : ACC                                                                                          \
                     : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                     \
    }                                                                                                               \
    __device__ __forceinline__ void NAME##_m64n##N##k16(float (&d)[N / 2], unsigned long long desc_a,                \
                                                        unsigned long long desc_b, int scale_d, PEAK_CTYPE_##TYPE)  \
    {                                                                                                               \
        NAME##_m64n##N##k16_##TYPE(d, desc_a, desc_b, scale_d);                                                    \
    }
PEAK_WGMMA(wgmma, 128, f16, PEAK_R64, PEAK_D64, "%64", "%65", "%66", 1)
PEAK_WGMMA(wgmma, 128, bf16, PEAK_R64, PEAK_D64, "%64", "%65", "%66", 1)
PEAK_WGMMA(wgmma, 256, f16, PEAK_R128, PEAK_D128, "%128", "%129", "%130", 1)
PEAK_WGMMA(wgmma, 256, bf16, PEAK_R128, PEAK_D128, "%128", "%129", "%130", 1)
// B K-major too (trans-b 0): B is an N x K row-major tile, e.g. the keys of attention's S = Q K^T, stored like A.
PEAK_WGMMA(wgmma_kmajor, 128, f16, PEAK_R64, PEAK_D64, "%64", "%65", "%66", 0)
PEAK_WGMMA(wgmma_kmajor, 128, bf16, PEAK_R64, PEAK_D64, "%64", "%65", "%66", 0)
// N = 64 (e.g. conv2d's 64 filters against a K-major patch of x)
PEAK_WGMMA(wgmma_kmajor, 64, f16, PEAK_R32, PEAK_D32, "%32", "%33", "%34", 0)
PEAK_WGMMA(wgmma_kmajor, 64, bf16, PEAK_R32, PEAK_D32, "%32", "%33", "%34", 0)
// A from registers (the RS form): a[0..3] is the warp's 16 x 16 slice of A in mma.sync's m16n8k16 A layout (row g,
// columns 2q, 2q+1; row g + 8; then the same 8 columns on), so an m64nN f32 accumulator rounded in pairs is one:
// a[i] = pack(d[8kk + 2i], d[8kk + 2i + 1]) for k-step kk. B MN-major (trans-b 1), as in wgmma_m64n*k16.
#define PEAK_WGMMA_RS(N, TYPE, REGS, ACC, A, B, SCALE)                                                                \
    __device__ __forceinline__ void wgmma_rs_m64n##N##k16_##TYPE(float (&d)[N / 2], const unsigned (&a)[4],         \
                                                                 unsigned long long desc_b, int scale_d)             \
    {                                                                                                               \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE ", 0;\n"                                             \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #TYPE "." #TYPE " {" REGS "}, " A ", " B       \
                     ", p, 1, 1, 1;\n}\n"                                                                            \
                     : ACC                                                                                          \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));                     \
    }                                                                                                               \
    __device__ __forceinline__ void wgmma_rs_m64n##N##k16(float (&d)[N / 2], const unsigned (&a)[4],                \
                                                          unsigned long long desc_b, int scale_d, PEAK_CTYPE_##TYPE) \
    {                                                                                                               \
        wgmma_rs_m64n##N##k16_##TYPE(d, a, desc_b, scale_d);                                                       \
    }
PEAK_WGMMA_RS(128, f16, PEAK_R64, PEAK_D64, "{%64, %65, %66, %67}", "%68", "%69")
PEAK_WGMMA_RS(128, bf16, PEAK_R64, PEAK_D64, "{%64, %65, %66, %67}", "%68", "%69")
#undef PEAK_WGMMA_RS
#undef PEAK_WGMMA
#undef PEAK_R128
#undef PEAK_R64
#undef PEAK_R32
#undef PEAK_D128
#undef PEAK_D64
#undef PEAK_D32
#undef PEAK_D8
#undef PEAK_CTYPE_bf16
#undef PEAK_CTYPE_f16

// Store a warpgroup's 64 x (R / 2) f32 fragment (layout above) to row-major C (M x N) at (row0, col0), skipping
// elements outside C. `t` is the thread's index within its warpgroup (0..127).
template <int R>
__device__ __forceinline__ void store_fragment(float* C, const float (&d)[R], int M, int N, int row0, int col0, int t)
{
    const int row = row0 + 16 * (t / 32) + (t % 32) / 4, col = col0 + 2 * (t % 4);
    const bool pairs = (N % 2) == 0;  // float2 stores stay 8-byte aligned only when the row pitch is even
#pragma unroll
    for (int j = 0; j < R / 4; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = row + 8 * h, c = col + 8 * j;
            if (r >= M) continue;
            float* p = C + static_cast<long long>(r) * N + c;
            if (pairs && c + 1 < N) {
                *reinterpret_cast<float2*>(p) = make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
            } else {
                if (c < N) p[0] = d[4 * j + 2 * h];
                if (c + 1 < N) p[1] = d[4 * j + 2 * h + 1];
            }
        }
    }
}

// ---- registers, clusters ---------------------------------------------------------------------------------------

// Warpgroup-wide register reallocation (all 128 threads, same N, a multiple of 8 in 24..256): a producer warpgroup
// gives registers back (dec) so the consumer warpgroups can take them (inc). The block's total must fit the SM:
// e.g. 384 threads as 1 producer at 40 + 2 consumers at 232 = 64512 <= 65536 registers.
template <int N> __device__ __forceinline__ void setmaxnreg_inc()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void setmaxnreg_dec()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

// This CTA's rank in its cluster (0 .. cluster size - 1); 0 without a cluster launch.
__device__ __forceinline__ unsigned cluster_rank()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

// Index of this CTA's cluster in the grid (x), and the number of clusters (x): the persistent scheduler's unit.
__device__ __forceinline__ unsigned cluster_id_x()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ unsigned cluster_count_x()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%nclusterid.x;\n" : "=r"(r));
    return r;
}

// Barrier over every thread of every CTA in the cluster (each thread executes it, no divergence within a warp):
// after barrier inits (peers may then multicast into and arrive on this CTA's barriers) and before exit (no CTA may
// leave while a peer can still write its shared memory).
__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// ---- fallback ----------------------------------------------------------------------------------------------------

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// C[m0 .. m0+bm) x [n0 .. n0+bn) = A * B with plain loads and f32 FMAs, every thread of the block striding over the
// tile: the correct, slow path for sizes where tma_usable() is false. Any M, N, K; no shared memory.
template <class T>
__device__ void fallback_tile(const T* A, const T* B, float* C, int M, int N, int K, int m0, int n0, int bm, int bn)
{
    for (int i = threadIdx.x; i < bm * bn; i += blockDim.x) {
        const int r = m0 + i / bn, c = n0 + i % bn;
        if (r >= M || c >= N) continue;
        float acc = 0.f;
        for (int k = 0; k < K; ++k)
            acc += to_float(A[static_cast<long long>(r) * K + k]) * to_float(B[static_cast<long long>(k) * N + c]);
        C[static_cast<long long>(r) * N + c] = acc;
    }
}

}  // namespace peak
