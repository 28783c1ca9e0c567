// Hopper step (a): TMA + wgmma + an mbarrier multistage pipeline (bf16 inputs, f32 accumulation and output).
// Block tile 128x128, K steps of 64; 256 threads = 2 warpgroups, warpgroup w computing rows 64w..64w+63 with
// wgmma.m64n128k16 (64 f32 accumulators per thread). The server encodes TMA descriptors of A (box 128x64) and B
// (box 64x64, two per stage) with the 128-byte swizzle wgmma reads: A K-major, B MN-major in 64-column panels.
// Pipeline: STAGES stages, each with a `full` barrier (TMA bytes landed) and an `empty` barrier (all 8 warps done
// reading). Thread 0 fills stage t % STAGES with tile t after that stage's previous tile was released.
// Sizes TMA cannot map (a row pitch not a multiple of 16 bytes) get zero maps: the block then computes its tile with
// plain loads (peak::fallback_tile).
// peak: entry=gemm grid=(cdiv(N, 128), cdiv(M, 128), 1) block=(256, 1, 1) shared=STAGES*32768+1024
// peak: params STAGES=[4, 3, 5, 6]
// peak: tensor_map A box=(128, 64) swizzle=128
// peak: tensor_map B box=(64, 64) swizzle=128
#include <peak/hopper.cuh>

typedef __nv_bfloat16 T;
#define BM 128
#define BN 128
#define BK 64
#define A_BYTES (BM * BK * 2)  // 16384: 128 rows of 128 bytes
#define PANEL_BYTES (BK * 64 * 2)  // 8192: 64 k-rows x 64 columns of B
#define STAGE_BYTES (A_BYTES + 2 * PANEL_BYTES)

extern "C" __global__ void __launch_bounds__(256) gemm(const T* A, const T* B, float* C, int M, int N, int K,
                                                      const __grid_constant__ peak::TensorMap mapA,
                                                      const __grid_constant__ peak::TensorMap mapB)
{
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    if (!peak::tma_usable(mapA) || !peak::tma_usable(mapB)) {
        peak::fallback_tile(A, B, C, M, N, K, m0, n0, BM, BN);
        return;
    }
    extern __shared__ unsigned char smem[];
    __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
    const unsigned base = (peak::smem_addr(smem) + 1023) & ~1023u;  // the swizzle works on absolute address bits
    const int tid = threadIdx.x, wg = tid / 128, tiles = (K + BK - 1) / BK;
    if (tid == 0) {
        peak::tma_prefetch(mapA);
        peak::tma_prefetch(mapB);
        for (int s = 0; s < STAGES; ++s) {
            peak::mbar_init(peak::smem_addr(&full[s]), 1);
            peak::mbar_init(peak::smem_addr(&empty[s]), 8);
        }
        peak::mbar_init_fence();
    }
    __syncthreads();

    auto fill = [&](int t) {  // thread 0: tile t into stage t % STAGES
        const unsigned stage = base + (t % STAGES) * STAGE_BYTES, bar = peak::smem_addr(&full[t % STAGES]);
        peak::mbar_arrive_expect_tx(bar, STAGE_BYTES);
        peak::tma_load_2d(stage, mapA, bar, t * BK, m0);
        for (int p = 0; p < 2; ++p) peak::tma_load_2d(stage + A_BYTES + p * PANEL_BYTES, mapB, bar, n0 + 64 * p, t * BK);
    };
    if (tid == 0)
        for (int t = 0; t < STAGES && t < tiles; ++t) fill(t);

    float d[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) d[i] = 0.f;
    for (int t = 0; t < tiles; ++t) {
        const int s = t % STAGES;
        const unsigned parity = (t / STAGES) & 1, stage = base + s * STAGE_BYTES;
        peak::mbar_wait(peak::smem_addr(&full[s]), parity);
        peak::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            const unsigned long long da = peak::wgmma_desc_sw128(stage + wg * 64 * 128 + kk * 32, 16, 1024);
            const unsigned long long db = peak::wgmma_desc_sw128(stage + A_BYTES + kk * 16 * 128, PANEL_BYTES, 1024);
            peak::wgmma_m64n128k16(d, da, db, 1, T());
        }
        peak::wgmma_commit();
        peak::wgmma_wait<0>();
        if (tid % 32 == 0) peak::mbar_arrive(peak::smem_addr(&empty[s]));
        if (tid == 0 && t + STAGES < tiles) {  // refill this stage once all 8 warps have read it
            peak::mbar_wait(peak::smem_addr(&empty[s]), parity);
            fill(t + STAGES);
        }
    }
    peak::store_fragment(C, d, M, N, m0 + 64 * wg, n0, tid % 128);
}
