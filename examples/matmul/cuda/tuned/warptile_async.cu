// Warp tiling (catalog: warp-tiling) applied to the cp.async-pipelined kernel (tuned/cp_async.cu): the copies, the
// transposed A tile and the STAGES-deep pipeline are unchanged; only the compute loop and the epilogue index by warp
// and lane. A block of (BM/WM)*(BN/WN) warps computes a BM x BN tile of C; each warp a WM x WN tile, swept as
// WMITER x WNITER sub-tiles of WSUBM x WSUBN; each lane a TM x TN piece of every sub-tile, so a lane holds
// (WMITER*TM) x (WNITER*TN) accumulators and reads its operands from shared memory as float4s that a warp shares
// (A) or reads contiguously (B). MINB blocks per SM bound the registers (__launch_bounds__).
// Copies: B row segments as 16-byte cp.async.cg, A element by element as 4-byte cp.async.ca into As[k][m] (rows of
// BM + 4 floats): each warp copies an 8 (k) x 4 (m) patch per instruction, whole 32-byte sectors of A, whose 32
// transposing shared stores fall in 32 different banks. Out-of-range elements are zero-filled by the copies, so any
// M, N, K works; interior tiles skip the checks.
// Defaults: the fastest of 33 configurations timed on an H200 at 4096^3 (tools/sgemm_anatomy.py): a 128 x 256 block
// tile of 8 warps, each 64 x 64 (TM = TN = 8, WNITER = 2), 2 stages, one block per SM: 47.7 TFLOP/s, 94-96% of
// cuBLAS at 4096^3 and 96% at 8192^3 there (its twin TN = 4, WNITER = 4 ran as fast); the best 128 x 128 tile, 2.3%
// slower.
// peak: entry=matmul_wta grid=(cdiv(N, BN), cdiv(M, BM), 1) block=((BM // WM) * (BN // WN) * 32, 1, 1) shared=STAGES*BK*(BM+4+BN)*4
// peak: params BM=[128, 64, 256] BN=[256, 128, 64] BK=[16, 8, 32] WM=[64, 32, 128] WN=[64, 32, 128] WMITER=[1, 2, 4] WNITER=[2, 1, 4] TM=[8, 4] TN=[8, 4] STAGES=[2, 3, 4] MINB=[1, 2]
// peak: where=BM % WM == 0 and BN % WN == 0 and WM % (WMITER * TM) == 0 and WN % (WNITER * TN) == 0
// peak: where=(WM // (WMITER * TM)) * (WN // (WNITER * TN)) == 32
// peak: where=(BM // WM) * (BN // WN) >= 2 and (BM // WM) * (BN // WN) <= 8 and WMITER * TM * WNITER * TN <= 128
// peak: where=MINB * (STAGES * BK * (BM + 4 + BN) * 4 + 1024) <= 233472
// peak: where=(BM // WM) * (BN // WN) % (BK // 8) == 0 and (BM // WM) * (BN // WN) * 32 % (BN // 4) == 0
#define NT ((BM / WM) * (BN / WN) * 32)
#define WSUBM (WM / WMITER)
#define WSUBN (WN / WNITER)
#define LDA (BM + 4)                  // transposed A row: 4 floats of padding, float4-aligned, 4 (mod 32) banks
#define A_STAGE (BK * LDA)            // floats per stage
#define B_STAGE (BK * BN)
#define A_ELEMS (BM * BK)             // 4-byte copies per A tile
#define B_CHUNKS (BK * BN / 4)        // 16-byte copies per B tile
#define A_LOADS ((A_ELEMS + NT - 1) / NT)
#define B_LOADS ((B_CHUNKS + NT - 1) / NT)
#define A_STEP ((NT / 32) / (BK / 8) * 4)  // rows between a thread's A copies
#define B_STEP (NT / (BN / 4))             // k rows between a thread's B copies
static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 8 == 0 && (NT / 32) % (BK / 8) == 0 && NT % (BN / 4) == 0,
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

extern "C" __global__ void __launch_bounds__(NT, MINB) matmul_wta(const float* A, const float* B, float* C,
                                                            int M, int N, int K)
{
    extern __shared__ __align__(16) float smem[];
    float* const As = smem;                     // [STAGES][BK][LDA]
    float* const Bs = smem + STAGES * A_STAGE;  // [STAGES][BK][BN]
    const unsigned sA = (unsigned)__cvta_generic_to_shared(As), sB = (unsigned)__cvta_generic_to_shared(Bs);
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int warpRow = warp / (BN / WN), warpCol = warp % (BN / WN);
    const int tRow = lane / (WSUBN / TN), tCol = lane % (WSUBN / TN);
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const bool vecB = N % 4 == 0;
    const int tiles = (K + BK - 1) / BK;

    // Copy roles. A: the tile is (BM/4) x (BK/8) patches of 4 rows x 8 k; copy l of this warp is patch
    // warp + l * (NT/32): rows aRow + l * A_STEP, k = aK, with lane -> (row lane/8, k lane%8). B: 16-byte chunk
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
                if (A_ELEMS % NT == 0 || aRow + l * A_STEP < BM)
                    cp_async4(aStage + 4 * l * A_STEP, aSrc + (size_t)l * A_STEP * K + k0, true);
#pragma unroll
            for (int l = 0; l < B_LOADS; ++l)
                if (B_CHUNKS % NT == 0 || bRow + l * B_STEP < BK)
                    cp_async16(bStage + 4 * l * B_STEP * BN, bSrc + (size_t)(k0 + l * B_STEP) * N, 16);
            return;
        }
        const bool aColOk = k0 + aK < K;
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            if (A_ELEMS % NT == 0 || aRow + l * A_STEP < BM) {
                const bool ok = aColOk && m0 + aRow + l * A_STEP < M;  // source size 0 writes a zero
                cp_async4(aStage + 4 * l * A_STEP, ok ? aSrc + (size_t)l * A_STEP * K + k0 : A, ok);
            }
        }
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            if (B_CHUNKS % NT == 0 || bRow + l * B_STEP < BK) {
                const int row = k0 + bRow + l * B_STEP;
                const unsigned dst = bStage + 4 * l * B_STEP * BN;
                const float* const src = bSrc + (size_t)(k0 + l * B_STEP) * N;
                if (vecB) {  // N % 4 == 0: the chunk is 16-byte aligned and wholly inside or wholly outside B
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
        }
    };

    float acc[WMITER * TM][WNITER * TN] = {};
    auto compute = [&](int stage) {
        const float* const as = As + stage * A_STAGE + warpRow * WM + tRow * TM;
        const float* const bs = Bs + stage * B_STAGE + warpCol * WN + tCol * TN;
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

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles)
            issue(s, s);
        cp_async_commit();
    }
    int readStage = 0, writeStage = STAGES - 1;
    for (int t = 0; t < tiles; ++t) {
        cp_async_wait<STAGES - 2>();  // this thread's copies of tile t have landed
        __syncthreads();              // everyone's have, and everyone is done with tile t-1
        if (t + STAGES - 1 < tiles)
            issue(t + STAGES - 1, writeStage);  // refills the stage of tile t-1
        cp_async_commit();
        compute(readStage);
        readStage = readStage == STAGES - 1 ? 0 : readStage + 1;
        writeStage = writeStage == STAGES - 1 ? 0 : writeStage + 1;
    }

#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int row = m0 + warpRow * WM + wm * WSUBM + tRow * TM + i;
            if (row >= M)
                continue;
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    const int col = n0 + warpCol * WN + wn * WSUBN + tCol * TN + j;
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
