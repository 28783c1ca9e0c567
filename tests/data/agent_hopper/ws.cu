// Agent-written Hopper step (b), from the catalog text `hopper-warp-specialization` applied to wgmma_tma.cu:
// one producer warpgroup (setmaxnreg.dec, thread 0 issues every TMA copy) and two wgmma consumer warpgroups
// (setmaxnreg.inc) on a 128x256 block tile with wgmma.m64n256k16, one wgmma group kept in flight.
// Stage = A 128x64 (one box, 16 KB) + B 64x256 (four 64x64 panels, 32 KB) = 48 KB.
// peak: entry=gemm grid=(cdiv(N, 256), cdiv(M, 128), 1) block=(384, 1, 1) shared=STAGES*49152+1024
// peak: params STAGES=[4, 3]
// peak: tensor_map A box=(128, 64) swizzle=128
// peak: tensor_map B box=(64, 64) swizzle=128
#include <peak/hopper.cuh>

typedef __nv_bfloat16 T;
#define BM 128
#define BN 256
#define BK 64
#define A_BYTES (BM * BK * 2)      // 16384: 128 rows of 128 bytes
#define PANEL_BYTES (BK * 64 * 2)  // 8192: 64 k-rows x 64 columns of B
#define STAGE_BYTES (A_BYTES + 4 * PANEL_BYTES)  // 49152

extern "C" __global__ void __launch_bounds__(384, 1) gemm(const T* A, const T* B, float* C, int M, int N, int K,
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
            peak::mbar_init(peak::smem_addr(&empty[s]), 8);  // the 8 consumer warps
        }
        peak::mbar_init_fence();
    }
    __syncthreads();

    if (wg == 0) {  // producer warpgroup
        peak::setmaxnreg_dec<40>();
        if (tid == 0) {
            for (int t = 0; t < tiles; ++t) {
                const int s = t % STAGES;
                const unsigned stage = base + s * STAGE_BYTES, bar = peak::smem_addr(&full[s]);
                peak::mbar_wait(peak::smem_addr(&empty[s]), ((t / STAGES) & 1) ^ 1);  // first round passes at once
                peak::mbar_arrive_expect_tx(bar, STAGE_BYTES);
                peak::tma_load_2d(stage, mapA, bar, t * BK, m0);
#pragma unroll
                for (int p = 0; p < 4; ++p)
                    peak::tma_load_2d(stage + A_BYTES + p * PANEL_BYTES, mapB, bar, n0 + 64 * p, t * BK);
            }
        }
        return;
    }
    peak::setmaxnreg_inc<232>();
    const int c = wg - 1;  // consumer c: rows 64c .. 64c+63 of the block tile
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.f;
    for (int t = 0; t < tiles; ++t) {
        const int s = t % STAGES;
        const unsigned stage = base + s * STAGE_BYTES;
        peak::mbar_wait(peak::smem_addr(&full[s]), (t / STAGES) & 1);
        peak::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            const unsigned long long da = peak::wgmma_desc_sw128(stage + c * 8192 + kk * 32, 16, 1024);
            const unsigned long long db = peak::wgmma_desc_sw128(stage + A_BYTES + kk * 2048, PANEL_BYTES, 1024);
            peak::wgmma_m64n256k16(d, da, db, 1, T());
        }
        peak::wgmma_commit();
        peak::wgmma_wait<1>();  // tile t-1's MMAs are done, tile t's still run
        if (t > 0 && tid % 32 == 0) peak::mbar_arrive(peak::smem_addr(&empty[(t - 1) % STAGES]));
    }
    peak::wgmma_wait<0>();
    peak::store_fragment(C, d, M, N, m0 + 64 * c, n0, tid % 128);
}
