// Hopper step (d): step (c) with 2-CTA clusters and TMA multicast (bf16 inputs, f32 accumulation and output). The two
// CTAs of a cluster compute vertically adjacent 128x256 tiles (tile rows 2u and 2u+1 of the same columns), so they
// need the same B tile: each loads two of its four 64x64 panels once and multicasts them into both CTAs' shared
// memory, halving B's L2 traffic. A stays per CTA. The persistent walk is over tile pairs, one per cluster step,
// in the grouped order of step (c) applied to pair rows.
// Barriers: full[s] expects the whole 48 KB stage in this CTA (its own A, B panels from both CTAs); empty[s] counts
// 16 arrivals, the 8 consumer warps of both CTAs, since the peer's producer writes this stage too. Barrier inits
// are published by a cluster barrier; a final one keeps either CTA from exiting while its peer can still write to
// or arrive on it.
// Sizes TMA cannot map get zero maps: each block then computes its tiles with plain loads (peak::fallback_tile).
// peak: entry=gemm grid=(min(CTAS, 2 * cdiv(cdiv(M, 128), 2) * cdiv(N, 256)), 1, 1) block=(384, 1, 1) shared=STAGES*49152+1024 cluster=(2, 1, 1)
// peak: params STAGES=[4, 3] GROUP=[8, 4, 16] CTAS=[132, 128]
// peak: where CTAS % 2 == 0
// peak: tensor_map A box=(128, 64) swizzle=128
// peak: tensor_map B box=(64, 64) swizzle=128
#include <peak/hopper.cuh>

typedef __nv_bfloat16 T;
#define BM 128
#define BN 256
#define BK 64
#define A_BYTES (BM * BK * 2)      // 16384: 128 rows of 128 bytes
#define PANEL_BYTES (BK * 64 * 2)  // 8192: 64 k-rows x 64 columns of B
#define STAGE_BYTES (A_BYTES + (BN / 64) * PANEL_BYTES)

// Tile pair `u` of the grouped order over pair rows; this CTA (cluster rank `rank`) takes tile row 2 * pair + rank.
__device__ __forceinline__ void tile_of(int u, int pairs_m, int tiles_n, int rank, int& m0, int& n0)
{
    const int band = u / (GROUP * tiles_n), first = band * GROUP, rows = min(GROUP, pairs_m - first);
    const int r = u % (GROUP * tiles_n);
    m0 = (2 * (first + r % rows) + rank) * BM;
    n0 = (r / rows) * BN;
}

extern "C" __global__ void __launch_bounds__(384, 1) gemm(const T* A, const T* B, float* C, int M, int N, int K,
                                                         const __grid_constant__ peak::TensorMap mapA,
                                                         const __grid_constant__ peak::TensorMap mapB)
{
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    if (!peak::tma_usable(mapA) || !peak::tma_usable(mapB)) {
        for (int t = blockIdx.x; t < tiles_m * tiles_n; t += gridDim.x)
            peak::fallback_tile(A, B, C, M, N, K, (t / tiles_n) * BM, (t % tiles_n) * BN, BM, BN);
        return;
    }
    extern __shared__ unsigned char smem[];
    __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
    const unsigned base = (peak::smem_addr(smem) + 1023) & ~1023u;  // same offset in both CTAs (same layout)
    const int tid = threadIdx.x, wg = tid / 128, ktiles = (K + BK - 1) / BK;
    const int rank = peak::cluster_rank(), pairs_m = (tiles_m + 1) / 2, count = pairs_m * tiles_n;
    const int first = peak::cluster_id_x(), stride = peak::cluster_count_x();
    if (tid == 0) {
        peak::tma_prefetch(mapA);
        peak::tma_prefetch(mapB);
        for (int s = 0; s < STAGES; ++s) {
            peak::mbar_init(peak::smem_addr(&full[s]), 1);
            peak::mbar_init(peak::smem_addr(&empty[s]), 16);
        }
        peak::mbar_init_fence();
    }
    peak::cluster_sync();

    if (wg == 0) {  // producer
        peak::setmaxnreg_dec<40>();
        if (tid == 0) {
            int it = 0;  // running k-tile counter, identical in both CTAs of the cluster
            for (int u = first; u < count; u += stride) {
                int m0, n0;
                tile_of(u, pairs_m, tiles_n, rank, m0, n0);
                for (int k = 0; k < ktiles; ++k, ++it) {
                    const int s = it % STAGES;
                    const unsigned stage = base + s * STAGE_BYTES, bar = peak::smem_addr(&full[s]);
                    peak::mbar_wait(peak::smem_addr(&empty[s]), ((it / STAGES) & 1) ^ 1);  // both CTAs released
                    peak::mbar_arrive_expect_tx(bar, STAGE_BYTES);
                    peak::tma_load_2d(stage, mapA, bar, k * BK, m0);
                    for (int p = 2 * rank; p < 2 * rank + 2; ++p)
                        peak::tma_load_2d_multicast(stage + A_BYTES + p * PANEL_BYTES, mapB, bar, n0 + 64 * p, k * BK,
                                                    0x3);
                }
            }
        }
        __syncwarp();
    } else {
        peak::setmaxnreg_inc<232>();
        const int c = wg - 1;  // consumer index: rows 64c .. 64c+63 of each tile
        int it = 0;
        float d[128];
        for (int u = first; u < count; u += stride) {
            int m0, n0;
            tile_of(u, pairs_m, tiles_n, rank, m0, n0);
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
                peak::wgmma_wait<1>();  // the previous k-tile's group is done: release its stage in both CTAs
                if (k > 0 && tid % 32 < 2)  // lanes 0 and 1 release the stage in CTA 0 and CTA 1
                    peak::mbar_arrive_cluster(peak::smem_addr(&empty[(it - 1) % STAGES]), tid % 32);
            }
            peak::wgmma_wait<0>();
            if (tid % 32 < 2) peak::mbar_arrive_cluster(peak::smem_addr(&empty[(it - 1) % STAGES]), tid % 32);
            peak::store_fragment(C, d, M, N, m0 + 64 * c, n0, tid % 128);
        }
    }
    peak::cluster_sync();
}
