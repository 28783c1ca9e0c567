// Hopper step (c): step (b) made persistent (f16 inputs, f32 accumulation and output). One block per SM (132 on an
// H100) walks the 128x256 output tiles t = blockIdx.x, blockIdx.x + gridDim.x, ... in a grouped order: GROUP tile
// rows advance together along N, so the blocks running at one time share A rows and B columns in L2. The producer
// runs ahead across tile boundaries (it fills the next tile's stages while the consumers store the previous tile);
// stage and parity come from one running k-tile counter that producer and consumers advance identically.
// Sizes TMA cannot map get zero maps: each block then computes its tiles with plain loads (peak::fallback_tile).
// peak: entry=gemm grid=(min(SM_COUNT, cdiv(M, 128) * cdiv(N, 256)), 1, 1) block=(384, 1, 1) shared=STAGES*49152+1024
// peak: params STAGES=[4, 3] GROUP=[8, 4, 16]
// peak: tensor_map A box=(128, 64) swizzle=128
// peak: tensor_map B box=(64, 64) swizzle=128
#include <peak/hopper.cuh>

typedef __half T;
#define BM 128
#define BN 256
#define BK 64
#define A_BYTES (BM * BK * 2)      // 16384: 128 rows of 128 bytes
#define PANEL_BYTES (BK * 64 * 2)  // 8192: 64 k-rows x 64 columns of B
#define STAGE_BYTES (A_BYTES + (BN / 64) * PANEL_BYTES)

// Tile `t` of the grouped order: GROUP consecutive tile rows form a band walked column by column.
__device__ __forceinline__ void tile_of(int t, int tiles_m, int tiles_n, int& m0, int& n0)
{
    const int band = t / (GROUP * tiles_n), first = band * GROUP, rows = min(GROUP, tiles_m - first);
    const int r = t % (GROUP * tiles_n);
    m0 = (first + r % rows) * BM;
    n0 = (r / rows) * BN;
}

extern "C" __global__ void __launch_bounds__(384, 1) gemm(const T* A, const T* B, float* C, int M, int N, int K,
                                                         const __grid_constant__ peak::TensorMap mapA,
                                                         const __grid_constant__ peak::TensorMap mapB)
{
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN, count = tiles_m * tiles_n;
    if (!peak::tma_usable(mapA) || !peak::tma_usable(mapB)) {
        for (int t = blockIdx.x; t < count; t += gridDim.x)
            peak::fallback_tile(A, B, C, M, N, K, (t / tiles_n) * BM, (t % tiles_n) * BN, BM, BN);
        return;
    }
    extern __shared__ unsigned char smem[];
    __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
    const unsigned base = (peak::smem_addr(smem) + 1023) & ~1023u;  // the swizzle works on absolute address bits
    const int tid = threadIdx.x, wg = tid / 128, ktiles = (K + BK - 1) / BK;
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

    if (wg == 0) {  // producer
        peak::setmaxnreg_dec<40>();
        if (tid == 0) {
            int it = 0;  // running k-tile counter over all of this block's tiles
            for (int t = blockIdx.x; t < count; t += gridDim.x) {
                int m0, n0;
                tile_of(t, tiles_m, tiles_n, m0, n0);
                for (int k = 0; k < ktiles; ++k, ++it) {
                    const int s = it % STAGES;
                    const unsigned stage = base + s * STAGE_BYTES, bar = peak::smem_addr(&full[s]);
                    peak::mbar_wait(peak::smem_addr(&empty[s]), ((it / STAGES) & 1) ^ 1);
                    peak::mbar_arrive_expect_tx(bar, STAGE_BYTES);
                    peak::tma_load_2d(stage, mapA, bar, k * BK, m0);
                    for (int p = 0; p < BN / 64; ++p)
                        peak::tma_load_2d(stage + A_BYTES + p * PANEL_BYTES, mapB, bar, n0 + 64 * p, k * BK);
                }
            }
        }
        return;
    }
    peak::setmaxnreg_inc<232>();
    const int c = wg - 1;  // consumer index: rows 64c .. 64c+63 of each tile
    int it = 0;
    float d[128];
    for (int t = blockIdx.x; t < count; t += gridDim.x) {
        int m0, n0;
        tile_of(t, tiles_m, tiles_n, m0, n0);
#pragma unroll
        for (int i = 0; i < 128; ++i) d[i] = 0.f;
        for (int k = 0; k < ktiles; ++k, ++it) {
            const int s = it % STAGES;
            const unsigned stage = base + s * STAGE_BYTES;
            peak::mbar_wait(peak::smem_addr(&full[s]), (it / STAGES) & 1);
            peak::wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk) {
                const unsigned long long da = peak::wgmma_desc_sw128(stage + c * 64 * 128 + kk * 32, 16, 1024);
                const unsigned long long db =
                    peak::wgmma_desc_sw128(stage + A_BYTES + kk * 16 * 128, PANEL_BYTES, 1024);
                peak::wgmma_m64n256k16(d, da, db, 1, T());
            }
            peak::wgmma_commit();
            peak::wgmma_wait<1>();  // the previous k-tile's group is done: its stage may be refilled
            if (k > 0 && tid % 32 == 0) peak::mbar_arrive(peak::smem_addr(&empty[(it - 1) % STAGES]));
        }
        peak::wgmma_wait<0>();
        if (tid % 32 == 0) peak::mbar_arrive(peak::smem_addr(&empty[(it - 1) % STAGES]));
        peak::store_fragment(C, d, M, N, m0 + 64 * c, n0, tid % 128);
    }
}
