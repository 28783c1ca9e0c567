// f32 matmul on tensor cores as 3xTF32 (catalog: three-xtf32): every f32 operand x is split into a TF32 big part
// hi = rna_tf32(x) and a small part lo = rna_tf32(x - hi), and each product is accumulated in f32 as
// lo_a*hi_b + hi_a*lo_b + hi_a*hi_b (lo_a*lo_b, about 2^-22 of the product, is dropped): three mma.sync.m16n8k8 TF32
// products in place of one FFMA each. Two-level accumulation keeps f32 accuracy: the tensor cores truncate as they
// accumulate, which over all of K (3K/8 steps) measured a relative L2 error of 3e-5 at K = 4096 on an H100, three
// times f32's tolerance; so each K tile's products are summed in fresh registers (part, at most 3*BK/8 steps) and
// added to the f32 accumulators with ordinary, round-to-nearest adds (3e-7 measured).
// Block tile BM x BN, K steps of BK; (BM/WM) x (BN/WN) warps, each owning a WM x WN warp tile of (WM/16) x (WN/8)
// m16n8 tiles. Shared memory (dynamic, STAGES stages): A as loaded, As[m][BK + 4] (k contiguous; rows 80 or 144
// bytes, odd multiples of 16, so every 8-row ldmatrix phase is conflict-free), read as A fragments with ldmatrix.x4
// (32-bit elements are pairs of 16-bit ones: matrix j of an x4 gives lane l row l/4, word l%4 = the tf32 A fragment);
// B as loaded, Bs[k][BN + 8] (8 mod 32 banks per row: a fragment's 4 k rows x 8 columns fall in 32 banks), read
// with scalar loads. Copies are cp.async: 16-byte chunks where K % 4 == 0 (A) and N % 4 == 0 (B), 4-byte ones
// otherwise; out-of-range elements are zero-filled, so any M, N, K works. One barrier per K tile.
// peak: entry=matmul_3xtf32 grid=(cdiv(N, BN), cdiv(M, BM), 1) block=((BM // WM) * (BN // WN) * 32, 1, 1) shared=STAGES*(BM*(BK+4)+BK*(BN+8))*4
// peak: params BM=[128, 64, 256] BN=[128, 64, 256] BK=[32, 16] WM=[64, 32] WN=[32, 64] STAGES=[3, 4, 2] MINB=[1, 2]
// peak: where=(BM // WM) * (BN // WN) >= 2 and MINB * (BM // WM) * (BN // WN) <= 8 and WM * WN <= 2048
// peak: where=MINB * (STAGES * (BM * (BK + 4) + BK * (BN + 8)) * 4 + 1024) <= 233472
#define NT ((BM / WM) * (BN / WN) * 32)
#define MI (WM / 16)                    // m16 tiles per warp
#define NI (WN / 8)                     // n8 tiles per warp
#define LDA (BK + 4)
#define LDB (BN + 8)
#define A_STAGE (BM * LDA)              // floats per stage
#define B_STAGE (BK * LDB)
#define A_CHUNKS (BM * BK / 4)          // 16-byte chunks per tile
#define B_CHUNKS (BK * BN / 4)
#define A_LOADS ((A_CHUNKS + NT - 1) / NT)
#define B_LOADS ((B_CHUNKS + NT - 1) / NT)
#define A_STEP (NT / (BK / 4))          // rows between a thread's A chunks
#define B_STEP (NT / (BN / 4))          // k rows between a thread's B chunks
static_assert(BK % 8 == 0 && NT % (BK / 4) == 0 && NT % (BN / 4) == 0, "tile shapes");

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
__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], unsigned addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
// TF32 rounding to nearest, ties away from zero, on the bits (cvt.rna.tf32.f32 without its Inf/NaN checks, which
// cost it four instructions more): carry bit 12 into the 10 kept mantissa bits, clear the 13 dropped ones.
__device__ __forceinline__ unsigned tf32_rna(unsigned x) { return (x + 0x1000u) & 0xffffe000u; }
// x = hi + lo + O(2^-22 |x|), both parts TF32 (low 13 bits zero); x - hi is exact in f32.
__device__ __forceinline__ void split_tf32(unsigned x, unsigned& hi, unsigned& lo)
{
    hi = tf32_rna(x);
    lo = tf32_rna(__float_as_uint(__uint_as_float(x) - __uint_as_float(hi)));
}
// Not volatile: a pure function of its registers, so the compiler may interleave it with loads and copies.
__device__ __forceinline__ void mma1688(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

extern "C" __global__ void __launch_bounds__(NT, MINB) matmul_3xtf32(const float* A, const float* B, float* C,
                                                               int M, int N, int K)
{
    extern __shared__ __align__(16) float smem[];
    float* const As = smem;                     // [STAGES][BM][LDA]
    float* const Bs = smem + STAGES * A_STAGE;  // [STAGES][BK][LDB]
    const unsigned sA = (unsigned)__cvta_generic_to_shared(As), sB = (unsigned)__cvta_generic_to_shared(Bs);
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = warp / (BN / WN), wn = warp % (BN / WN);
    const int g = lane / 4, t4 = lane % 4;      // mma fragment coordinates: group and thread in group
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const bool vecA = K % 4 == 0, vecB = N % 4 == 0;
    const int tiles = (K + BK - 1) / BK;

    // Copy roles: 16-byte chunk tid + l * NT of each tile, k fastest for A, n fastest for B.
    const int aRow = tid / (BK / 4), aCol = (tid % (BK / 4)) * 4;
    const int bRow = tid / (BN / 4), bCol = (tid % (BN / 4)) * 4;
    const float* const aSrc = A + (size_t)(m0 + aRow) * K + aCol;  // formed, never dereferenced, when out of range
    const float* const bSrc = B + (size_t)bRow * N + n0 + bCol;
    const unsigned aDst = sA + 4 * (aRow * LDA + aCol), bDst = sB + 4 * (bRow * LDB + bCol);
    const bool interior = m0 + BM <= M && n0 + BN <= N && vecA && vecB;  // with k0 + BK <= K: no checks
    auto issue = [&](int t, int stage) {
        const int k0 = t * BK;
        const unsigned aStage = aDst + 4 * stage * A_STAGE, bStage = bDst + 4 * stage * B_STAGE;
        if (interior && k0 + BK <= K) {
#pragma unroll
            for (int l = 0; l < A_LOADS; ++l)
                if (A_CHUNKS % NT == 0 || aRow + l * A_STEP < BM)
                    cp_async16(aStage + 4 * l * A_STEP * LDA, aSrc + (size_t)l * A_STEP * K + k0, 16);
#pragma unroll
            for (int l = 0; l < B_LOADS; ++l)
                if (B_CHUNKS % NT == 0 || bRow + l * B_STEP < BK)
                    cp_async16(bStage + 4 * l * B_STEP * LDB, bSrc + (size_t)(k0 + l * B_STEP) * N, 16);
            return;
        }
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            if (A_CHUNKS % NT == 0 || aRow + l * A_STEP < BM) {
                const int row = m0 + aRow + l * A_STEP, col = k0 + aCol;
                const unsigned dst = aStage + 4 * l * A_STEP * LDA;
                const float* const src = aSrc + (size_t)l * A_STEP * K + k0;
                if (vecA) {  // the chunk is 16-byte aligned and wholly inside or wholly outside A
                    const bool ok = row < M && col < K;
                    cp_async16(dst, ok ? src : A, ok ? 16 : 0);
                } else {
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        const bool ok = row < M && col + q < K;
                        cp_async4(dst + 4 * q, ok ? src + q : A, ok);
                    }
                }
            }
        }
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            if (B_CHUNKS % NT == 0 || bRow + l * B_STEP < BK) {
                const int row = k0 + bRow + l * B_STEP, col = n0 + bCol;
                const unsigned dst = bStage + 4 * l * B_STEP * LDB;
                const float* const src = bSrc + (size_t)(k0 + l * B_STEP) * N;
                if (vecB) {
                    const bool ok = row < K && col < N;
                    cp_async16(dst, ok ? src : B, ok ? 16 : 0);
                } else {
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        const bool ok = row < K && col + q < N;
                        cp_async4(dst + 4 * q, ok ? src + q : B, ok);
                    }
                }
            }
        }
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[i][j][e] = 0.0f;

    // ldmatrix roles: lanes 0-15 address rows 0-15 of an m16 tile at k 0-3 of the k8 step, lanes 16-31 the same rows
    // at k 4-7: matrices (rows 0-7, k 0-3), (8-15, 0-3), (0-7, 4-7), (8-15, 4-7) are a0..a3 of the tf32 fragment.
    const unsigned aFrag = sA + 4 * ((wm * WM + lane % 16) * LDA + (lane / 16) * 4);
    const float* const bFrag = Bs + t4 * LDB + wn * WN + g;  // b0 = (k t4, n g), b1 = (k t4 + 4, n g)
    auto compute = [&](int stage) {
        float part[MI][NI][4];
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    part[i][j][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 8) {
            unsigned bHi[NI][2], bLo[NI][2];
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const float* const b = bFrag + stage * B_STAGE + kk * LDB + j * 8;
                split_tf32(__float_as_uint(b[0]), bHi[j][0], bLo[j][0]);
                split_tf32(__float_as_uint(b[4 * LDB]), bHi[j][1], bLo[j][1]);
            }
            // One m16 tile's A fragment at a time (8 registers live); per tile the small products first, then the big
            // one, each pass over the n8 tiles (independent mma back to back).
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                unsigned raw[4], aHi[4], aLo[4];
                ldsm_x4(raw, aFrag + 4 * (stage * A_STAGE + i * 16 * LDA + kk));
#pragma unroll
                for (int r = 0; r < 4; ++r)
                    split_tf32(raw[r], aHi[r], aLo[r]);
#pragma unroll
                for (int j = 0; j < NI; ++j)
                    mma1688(part[i][j], aLo, bHi[j]);
#pragma unroll
                for (int j = 0; j < NI; ++j)
                    mma1688(part[i][j], aHi, bLo[j]);
#pragma unroll
                for (int j = 0; j < NI; ++j)
                    mma1688(part[i][j], aHi, bHi[j]);
            }
        }
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    acc[i][j][e] += part[i][j][e];  // round to nearest: no bias builds up over K
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
        __syncthreads();              // everyone's have, and every warp is done with tile t-1
        if (t + STAGES - 1 < tiles)
            issue(t + STAGES - 1, writeStage);  // refills the stage of tile t-1
        cp_async_commit();
        compute(readStage);
        readStage = readStage == STAGES - 1 ? 0 : readStage + 1;
        writeStage = writeStage == STAGES - 1 ? 0 : writeStage + 1;
    }

    // C fragment: d0, d1 at row g, columns 2*t4, 2*t4 + 1; d2, d3 at row g + 8. With N even a float2 store is 8-byte
    // aligned (the column is even) and col < N implies col + 1 < N.
    const bool even = N % 2 == 0;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) {
            const int col = n0 + wn * WN + j * 8 + 2 * t4;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = m0 + wm * WM + i * 16 + g + 8 * h;
                if (row < M && col < N) {
                    float* const p = C + (size_t)row * N + col;
                    if (even) {
                        *reinterpret_cast<float2*>(p) = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
                    } else {
                        p[0] = acc[i][j][2 * h];
                        if (col + 1 < N)
                            p[1] = acc[i][j][2 * h + 1];
                    }
                }
            }
        }
}
