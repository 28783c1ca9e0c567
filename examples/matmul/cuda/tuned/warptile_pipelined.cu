// warptile_async.cu with the issue-side losses it showed against cuBLAS's FFMA kernel on an H200 (80.8% of cycles
// issuing vs 90.6%, L2 hit rate 81% vs 90%) attacked one by one:
// 1. Register double-buffered fragments: step k's FFMAs run while step k+1's A/B fragments load from shared, and
//    the cp.async wait and the one __syncthreads of a k-tile sit before the tile's last FFMA step, right before
//    the next tile's first fragments load; so no FFMA ever waits on a shared load, across tile boundaries too
//    (in warptile_async.cu each tile begins with loads that nothing covers, after the barrier).
// 2. STAGES-deep cp.async ring (3 by default): a tile's copies get STAGES-1 tiles of FFMAs to land.
// 3. Lane layout 8 (M) x 4 (N) with strided fragments: a lane's 8 rows are 2 float4s 32 rows apart and its 16
//    columns 4 float4s 16 apart, so every LDS.128 of a warp reads one contiguous 128-byte (A) or 64-byte (B) span:
//    one shared wavefront each, 6 per k step for 128 FFMAs (warptile_async.cu's A reads span 256 bytes: 8).
// 4. Grouped rasterization: a 1-D grid walks RASTER block rows down M before stepping along N, so the ~132
//    co-resident blocks of a wave cover about RASTER x 132/RASTER tiles, a square-ish patch sharing A and B panels
//    in L2 (row-major order streams all of B, 64 MB at 4096^2, through a 50 MB L2 in every wave). RASTER=1 is
//    row-major order.
// Unchanged: the transposed A tile As[k][m] (rows BM + 4 floats) filled by 4-byte cp.async (a warp copies 4 rows x 8
// k, conflict-free), B by 16-byte cp.async when N % 4 == 0 and B is 16-byte aligned; out-of-range elements are
// zero-filled by the copies so any M, N, K >= 1 works, and interior tiles skip the checks.
// Each warp computes 64 x 64 of C, each lane 8 x 16 (128 accumulators); a block is (BM/64) x (BN/64) warps, and
// 4-warp blocks ask for 2 blocks per SM so an SM always holds 8 warps.
// Defaults: a guess for an H200 at 4096^3, not yet timed: warptile_async.cu's best tile (128 x 256, cuBLAS's
// 256x128 with its operands swapped), BK 16, 3 stages, groups of 16 block rows (16 x 2 MB of A panels and ~8 x 4 MB
// of B panels per wave).
// peak: entry=matmul_wtp grid=(cdiv(M, BM) * cdiv(N, BN), 1, 1) block=((BM // 64) * (BN // 64) * 32, 1, 1) shared=STAGES*BK*(BM+4+BN)*4
// peak: params BM=[128, 256, 64] BN=[256, 128] BK=[16, 8, 32] STAGES=[3, 2, 4] RASTER=[16, 8, 4, 1, 32]
// peak: where=(BM // 64) * (BN // 64) >= 4 and (BM // 64) * (BN // 64) <= 8
// peak: where=(STAGES * BK * (BM + 4 + BN) * 4 + 1024) * (8 // ((BM // 64) * (BN // 64))) <= 233472
#define WM 64
#define WN 64
#define NWARPS ((BM / WM) * (BN / WN))
#define NT (NWARPS * 32)
#define MINB (8 / NWARPS)                  // blocks per SM: 8 warps in all
#define LDA (BM + 4)                       // transposed A row: float4-aligned, 4 (mod 32) banks of padding
#define A_STAGE (BK * LDA)                 // floats per stage
#define B_STAGE (BK * BN)
#define A_LOADS (BM * BK / NT)             // 4-byte copies per thread per tile
#define B_LOADS (BK * BN / 4 / NT)         // 16-byte copies per thread per tile
#define A_STEP (NWARPS / (BK / 8) * 4)     // rows between a thread's A copies
#define B_STEP (NT / (BN / 4))             // k rows between a thread's B copies
static_assert(BM % WM == 0 && BN % WN == 0 && BK % 8 == 0 && NWARPS % (BK / 8) == 0 && NT % (BN / 4) == 0 &&
              (BM * BK) % NT == 0 && (BK * BN / 4) % NT == 0 && STAGES >= 2 && RASTER >= 1,
              "tile shapes: see the where lines");

__device__ __forceinline__ void cp_async4(unsigned dst, const float* src, bool valid)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async16(unsigned dst, const float* src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

extern "C" __global__ void __launch_bounds__(NT, MINB) matmul_wtp(const float* A, const float* B, float* C,
                                                                   int M, int N, int K)
{
    extern __shared__ __align__(16) float smem[];
    float* const As = smem;                     // [STAGES][BK][LDA]
    float* const Bs = smem + STAGES * A_STAGE;  // [STAGES][BK][BN]
    const unsigned sA = (unsigned)__cvta_generic_to_shared(As), sB = (unsigned)__cvta_generic_to_shared(Bs);
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int warpRow = warp / (BN / WN), warpCol = warp % (BN / WN);
    const int laneM = lane / 4, laneN = lane % 4;

    // Block -> tile: groups of RASTER block rows, walked down M first, then along N.
    const int tilesM = (M + BM - 1) / BM, tilesN = (N + BN - 1) / BN;
    const int perGroup = RASTER * tilesN, group = (int)blockIdx.x / perGroup;
    const int firstM = group * RASTER, rowsHere = min(tilesM - firstM, RASTER);
    const int inGroup = (int)blockIdx.x - group * perGroup;
    const int m0 = (firstM + inGroup % rowsHere) * BM, n0 = (inGroup / rowsHere) * BN;

    const bool vecB = N % 4 == 0 && (reinterpret_cast<size_t>(B) & 15) == 0;  // 16-byte copies stay aligned
    const bool vecC = N % 4 == 0 && (reinterpret_cast<size_t>(C) & 15) == 0;  // float4 stores stay aligned
    const int tiles = (K + BK - 1) / BK;

    // Copy roles. A: the tile is (BM/4) x (BK/8) patches of 4 rows x 8 k; copy l of this warp is patch
    // warp + l * NWARPS: rows aRow + l * A_STEP, k = aK, with lane -> (row lane/8, k lane%8). B: 16-byte chunk
    // tid + l * NT, n fastest: column bCol, k = bRow + l * B_STEP.
    const int aRow = (warp / (BK / 8)) * 4 + lane / 8, aK = (warp % (BK / 8)) * 8 + lane % 8;
    const int bRow = tid / (BN / 4), bCol = (tid % (BN / 4)) * 4;
    const float* const aSrc = A + (size_t)(m0 + aRow) * K + aK;  // formed, never dereferenced, when out of range
    const float* const bSrc = B + (size_t)bRow * N + n0 + bCol;
    const unsigned aDst = sA + 4 * (aK * LDA + aRow), bDst = sB + 4 * (bRow * BN + bCol);
    const bool interior = m0 + BM <= M && n0 + BN <= N && vecB;  // with k0 + BK <= K: no copy needs a check
    auto issue = [&](int t, int stage) {
        const int k0 = t * BK;
        const unsigned aStage = aDst + 4 * stage * A_STAGE, bStage = bDst + 4 * stage * B_STAGE;
        if (interior && k0 + BK <= K) {
#pragma unroll
            for (int l = 0; l < A_LOADS; ++l)
                cp_async4(aStage + 4 * l * A_STEP, aSrc + (size_t)l * A_STEP * K + k0, true);
#pragma unroll
            for (int l = 0; l < B_LOADS; ++l)
                cp_async16(bStage + 4 * l * B_STEP * BN, bSrc + (size_t)(k0 + l * B_STEP) * N, 16);
            return;
        }
        const bool aColOk = k0 + aK < K;
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const bool ok = aColOk && m0 + aRow + l * A_STEP < M;  // source size 0 writes a zero
            cp_async4(aStage + 4 * l * A_STEP, ok ? aSrc + (size_t)l * A_STEP * K + k0 : A, ok);
        }
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            const int row = k0 + bRow + l * B_STEP;
            const unsigned dst = bStage + 4 * l * B_STEP * BN;
            const float* const src = bSrc + (size_t)(k0 + l * B_STEP) * N;
            if (vecB) {  // the chunk is 16-byte aligned and wholly inside or wholly outside B (N % 4 == 0)
                const bool ok = row < K && n0 + bCol < N;
                cp_async16(dst, ok ? src : B, ok ? 16 : 0);
            } else {
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const bool ok = row < K && n0 + bCol + q < N;
                    cp_async4(dst + 4 * q, ok ? src + q : B, ok);
                }
            }
        }
    };

    // Fragments: a lane's rows are laneM*4 + {0..3, 32..35} of its warp's 64, its columns laneN*4 + 16*j + {0..3}.
    float acc[8][16] = {};
    float a[2][8], b[2][16];
    const float* const aFrag = As + warpRow * WM + laneM * 4;
    const float* const bFrag = Bs + warpCol * WN + laneN * 4;
    auto load = [&](int buf, int stage, int k) {
        const float* const as = aFrag + stage * A_STAGE + k * LDA;
        const float* const bs = bFrag + stage * B_STAGE + k * BN;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const float4 v = *reinterpret_cast<const float4*>(as + 32 * i);
            a[buf][4 * i + 0] = v.x; a[buf][4 * i + 1] = v.y; a[buf][4 * i + 2] = v.z; a[buf][4 * i + 3] = v.w;
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float4 v = *reinterpret_cast<const float4*>(bs + 16 * j);
            b[buf][4 * j + 0] = v.x; b[buf][4 * j + 1] = v.y; b[buf][4 * j + 2] = v.z; b[buf][4 * j + 3] = v.w;
        }
    };
    auto fma = [&](int buf) {
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int j = 0; j < 16; ++j)
                acc[i][j] += a[buf][i] * b[buf][j];
    };

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles)
            issue(s, s);
        cp_async_commit();
    }
    cp_async_wait<STAGES - 2>();  // tile 0 has landed (this thread's copies)
    __syncthreads();              // and everyone's
    load(0, 0, 0);
    int readStage = 0, writeStage = STAGES - 1;
    for (int t = 0; t < tiles; ++t) {
        // Refill the stage of tile t-1: every warp read its last fragment before the barrier that ended tile t-1.
        if (t + STAGES - 1 < tiles)
            issue(t + STAGES - 1, writeStage);
        cp_async_commit();
        const int nextStage = readStage == STAGES - 1 ? 0 : readStage + 1;
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            if (k < BK - 1) {
                load((k + 1) % 2, readStage, k + 1);
            } else {
                // Groups committed: tiles up to t + STAGES - 1; tile t+1 is the (STAGES-1)th newest.
                cp_async_wait<STAGES - 2>();
                __syncthreads();  // tile t+1 is everyone's; tile t's fragments are all in registers
                if (t + 1 < tiles)
                    load((k + 1) % 2, nextStage, 0);
            }
            fma(k % 2);
        }
        readStage = nextStage;
        writeStage = writeStage == STAGES - 1 ? 0 : writeStage + 1;
    }

#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = m0 + warpRow * WM + (i / 4) * 32 + laneM * 4 + i % 4;
        if (row >= M)
            continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int col = n0 + warpCol * WN + 16 * j + laneN * 4;
            const float* const v = &acc[i][4 * j];
            float* const out = C + (size_t)row * N + col;
            if (vecC && col + 3 < N) {
                *reinterpret_cast<float4*>(out) = make_float4(v[0], v[1], v[2], v[3]);
            } else {
#pragma unroll
                for (int q = 0; q < 4; ++q)
                    if (col + q < N)
                        out[q] = v[q];
            }
        }
    }
}
