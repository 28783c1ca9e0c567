// Warp tiling (catalog: warp-tiling) on top of 128-bit loads and a double-buffered shared stage, every tile size a
// tuning parameter. A block of (BM/WM)*(BN/WN) warps computes a BM x BN tile of C; each warp a WM x WN tile, swept
// as WMITER x WNITER sub-tiles of WSUBM x WSUBN; each lane a TM x TN piece of every sub-tile, so a lane holds
// (WMITER*TM) x (WNITER*TN) accumulators and reads its operands from shared memory as float4s that a warp shares
// (A) or reads contiguously (B). The next K tile is loaded into registers while the current one is multiplied,
// then stored into the other shared buffer: one barrier per tile. A is stored transposed, rows padded by 4 floats.
// MINB blocks per SM bound the registers (__launch_bounds__), trading accumulators in registers for occupancy.
// Any M, N, K: 128-bit global loads and stores where a row is 16-byte aligned and wholly inside, guarded scalars
// otherwise; out-of-range tile elements are zero.
// peak: entry=matmul_wt grid=(cdiv(N, BN), cdiv(M, BM), 1) block=((BM // WM) * (BN // WN) * 32, 1, 1) shared=8*BK*(BM+4+BN)
// peak: params BM=[128, 64, 256] BN=[128, 64, 256] BK=[16, 8, 32] WM=[64, 32, 128] WN=[64, 32, 128] WMITER=[2, 1, 4] WNITER=[2, 1, 4] TM=[8, 4] TN=[4, 8] MINB=[2, 1]
// peak: where=BM % WM == 0 and BN % WN == 0 and WM % (WMITER * TM) == 0 and WN % (WNITER * TN) == 0
// peak: where=(WM // (WMITER * TM)) * (WN // (WNITER * TN)) == 32
// peak: where=(BM // WM) * (BN // WN) >= 2 and (BM // WM) * (BN // WN) <= 8 and WMITER * TM * WNITER * TN <= 128
#define NT ((BM / WM) * (BN / WN) * 32)
#define WSUBM (WM / WMITER)
#define WSUBN (WN / WNITER)
#define LDA (BM + 4)  // transposed A row stride: 4 floats of padding keep float4 alignment and spread banks
#define A_CHUNKS (BM * BK / 4)
#define B_CHUNKS (BK * BN / 4)
#define A_LOADS ((A_CHUNKS + NT - 1) / NT)
#define B_LOADS ((B_CHUNKS + NT - 1) / NT)

__device__ __forceinline__ float4 load4(const float* base, int row, int col, int rows, int cols, bool vec)
{
    const size_t at = (size_t)row * cols + col;
    if (vec && row < rows && col + 3 < cols)
        return *reinterpret_cast<const float4*>(base + at);
    const bool r = row < rows;
    return make_float4((r && col + 0 < cols) ? base[at + 0] : 0.0f, (r && col + 1 < cols) ? base[at + 1] : 0.0f,
                       (r && col + 2 < cols) ? base[at + 2] : 0.0f, (r && col + 3 < cols) ? base[at + 3] : 0.0f);
}

extern "C" __global__ void __launch_bounds__(NT, MINB) matmul_wt(const float* A, const float* B, float* C,
                                                           int M, int N, int K)
{
    extern __shared__ __align__(16) float smem[];
    float* const As = smem;                // [2][BK][LDA]
    float* const Bs = smem + 2 * BK * LDA; // [2][BK][BN]
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int warpRow = warp / (BN / WN), warpCol = warp % (BN / WN);
    const int tRow = lane / (WSUBN / TN), tCol = lane % (WSUBN / TN);
    const int rowBase = blockIdx.y * BM, colBase = blockIdx.x * BN;
    const bool vecA = K % 4 == 0, vecB = N % 4 == 0;

    float4 nextA[A_LOADS], nextB[B_LOADS];
    auto fetch = [&](int k0) {
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int c = tid + l * NT;  // k fastest: a warp reads whole row segments of A
            if (c < A_CHUNKS)
                nextA[l] = load4(A, rowBase + c / (BK / 4), k0 + (c % (BK / 4)) * 4, M, K, vecA);
        }
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            const int c = tid + l * NT;
            if (c < B_CHUNKS)
                nextB[l] = load4(B, k0 + c / (BN / 4), colBase + (c % (BN / 4)) * 4, K, N, vecB);
        }
    };
    auto stash = [&](int buf) {
        float* const as = As + buf * BK * LDA;
        float* const bs = Bs + buf * BK * BN;
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int c = tid + l * NT;
            if (c < A_CHUNKS) {
                const int m = c / (BK / 4), k = (c % (BK / 4)) * 4;
                as[(k + 0) * LDA + m] = nextA[l].x;
                as[(k + 1) * LDA + m] = nextA[l].y;
                as[(k + 2) * LDA + m] = nextA[l].z;
                as[(k + 3) * LDA + m] = nextA[l].w;
            }
        }
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            const int c = tid + l * NT;
            if (c < B_CHUNKS)
                *reinterpret_cast<float4*>(bs + (c / (BN / 4)) * BN + (c % (BN / 4)) * 4) = nextB[l];
        }
    };

    float acc[WMITER * TM][WNITER * TN] = {};
    auto compute = [&](int buf) {
        const float* const as = As + buf * BK * LDA + warpRow * WM + tRow * TM;
        const float* const bs = Bs + buf * BK * BN + warpCol * WN + tCol * TN;
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[WMITER * TM], b[WNITER * TN];
#pragma unroll
            for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
                for (int i = 0; i < TM; i += 4) {
                    const float4 v = *reinterpret_cast<const float4*>(as + k * LDA + wm * WSUBM + i);
                    a[wm * TM + i + 0] = v.x; a[wm * TM + i + 1] = v.y;
                    a[wm * TM + i + 2] = v.z; a[wm * TM + i + 3] = v.w;
                }
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    const float4 v = *reinterpret_cast<const float4*>(bs + k * BN + wn * WSUBN + j);
                    b[wn * TN + j + 0] = v.x; b[wn * TN + j + 1] = v.y;
                    b[wn * TN + j + 2] = v.z; b[wn * TN + j + 3] = v.w;
                }
#pragma unroll
            for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
                for (int j = 0; j < WNITER * TN; ++j)
                    acc[i][j] += a[i] * b[j];
        }
    };

    const int tiles = (K + BK - 1) / BK;
    fetch(0);
    stash(0);
    __syncthreads();
    for (int t = 0; t < tiles; ++t) {
        const bool more = t + 1 < tiles;
        if (more)
            fetch((t + 1) * BK);  // global latency hides behind this tile's FMAs
        compute(t & 1);
        if (more)
            stash((t + 1) & 1);  // that buffer was last read before the previous barrier
        __syncthreads();
    }

#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int row = rowBase + warpRow * WM + wm * WSUBM + tRow * TM + i;
            if (row >= M)
                continue;
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    const int col = colBase + warpCol * WN + wn * WSUBN + tCol * TN + j;
                    const float* v = &acc[wm * TM + i][wn * TN + j];
                    float* const out = C + (size_t)row * N + col;
                    if (vecB && col + 3 < N) {
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
