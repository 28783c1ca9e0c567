// 2-D register blocking fed by a STAGES-deep cp.async pipeline (catalog: cuda-cp-async), every tile size a tuning
// parameter. A block of (BM/TM)*(BN/TN) threads computes a BM x BN tile of C; each thread a TM x TN micro-tile made
// of 4 x 4 pieces spread over the block tile (rows ty*4 + i*4*(BM/TM), columns tx*4 + j*4*(BN/TN)), so its shared
// reads are float4s that a warp broadcasts (A) or reads contiguously (B), and its stores of C are float4s.
// Global -> shared copies bypass registers: B row segments as 16-byte cp.async.cg, A element by element as 4-byte
// cp.async.ca, because A is stored transposed (As[k][m], rows of BM + 4 floats) for the float4 reads along m. Each
// warp copies an 8 (k) x 4 (m) patch of A per instruction: 4 full 32-byte sectors of global memory, and with the
// row stride of BM + 4 = 4 (mod 32) words the 32 transposing shared stores fall in 32 different banks.
// Pipeline: tiles t+1 .. t+STAGES-1 are in flight while tile t is multiplied; one commit group per tile (empty ones
// too, so wait_group counts stay in step) and one barrier per tile. Out-of-range elements are zero-filled by the
// copies (source size 0), so any M, N, K works; 16-byte copies of B where N % 4 == 0, 4-byte ones otherwise.
// Tiles wholly inside A and B (all but the edges) take a copy loop with no checks at all.
// MINB blocks per SM bound the registers (__launch_bounds__): 2 blocks of 256 threads leave 128 per thread.
// peak: entry=matmul_cpa grid=(cdiv(N, BN), cdiv(M, BM), 1) block=((BM // TM) * (BN // TN), 1, 1) shared=STAGES*BK*(BM+4+BN)*4
// peak: params BM=[128, 64, 256] BN=[128, 64, 256] BK=[16, 8, 32] TM=[8, 4, 16] TN=[8, 4, 16] STAGES=[2, 3, 4] MINB=[2, 1]
// peak: where=(BM // TM) * (BN // TN) >= 64 and (BM // TM) * (BN // TN) <= 1024 and TM * TN <= 128
// peak: where=MINB * (STAGES * BK * (BM + 4 + BN) * 4 + 1024) <= 233472
// peak: where=(BM // TM) * (BN // TN) // 32 % (BK // 8) == 0 and (BM // TM) * (BN // TN) % (BN // 4) == 0
#define NT ((BM / TM) * (BN / TN))
#define TX (BN / TN)                  // threads along n
#define LDA (BM + 4)                  // transposed A row: 4 floats of padding, float4-aligned, 4 (mod 32) banks
#define A_STAGE (BK * LDA)            // floats per stage
#define B_STAGE (BK * BN)
#define A_ELEMS (BM * BK)             // 4-byte copies per A tile
#define B_CHUNKS (BK * BN / 4)        // 16-byte copies per B tile
#define A_LOADS ((A_ELEMS + NT - 1) / NT)
#define B_LOADS ((B_CHUNKS + NT - 1) / NT)
#define A_STEP ((NT / 32) / (BK / 8) * 4)  // rows between a thread's A copies
#define B_STEP (NT / (BN / 4))             // k rows between a thread's B copies
static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 8 == 0 && NT % 32 == 0 && (NT / 32) % (BK / 8) == 0 &&
              NT % (BN / 4) == 0, "tile shapes: see the where lines");

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

extern "C" __global__ void __launch_bounds__(NT, MINB) matmul_cpa(const float* A, const float* B, float* C,
                                                            int M, int N, int K)
{
    extern __shared__ __align__(16) float smem[];
    float* const As = smem;                     // [STAGES][BK][LDA]
    float* const Bs = smem + STAGES * A_STAGE;  // [STAGES][BK][BN]
    const unsigned sA = (unsigned)__cvta_generic_to_shared(As), sB = (unsigned)__cvta_generic_to_shared(Bs);
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int tx = tid % TX, ty = tid / TX;
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

    float acc[TM][TN] = {};
    auto compute = [&](int stage) {
        const float* const as = As + stage * A_STAGE + ty * 4;
        const float* const bs = Bs + stage * B_STAGE + tx * 4;
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM / 4; ++i) {
                const float4 v = *reinterpret_cast<const float4*>(as + k * LDA + i * 4 * (BM / TM));
                a[4 * i + 0] = v.x; a[4 * i + 1] = v.y; a[4 * i + 2] = v.z; a[4 * i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < TN / 4; ++j) {
                const float4 v = *reinterpret_cast<const float4*>(bs + k * BN + j * 4 * TX);
                b[4 * j + 0] = v.x; b[4 * j + 1] = v.y; b[4 * j + 2] = v.z; b[4 * j + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j)
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
    for (int i = 0; i < TM; ++i) {
        const int row = m0 + (i / 4) * 4 * (BM / TM) + ty * 4 + i % 4;
        if (row >= M)
            continue;
#pragma unroll
        for (int j = 0; j < TN / 4; ++j) {
            const int col = n0 + j * 4 * TX + tx * 4;
            float* const out = C + (size_t)row * N + col;
            if (vecB && col + 3 < N) {
                *reinterpret_cast<float4*>(out) =
                    make_float4(acc[i][4 * j], acc[i][4 * j + 1], acc[i][4 * j + 2], acc[i][4 * j + 3]);
            } else {
#pragma unroll
                for (int q = 0; q < 4; ++q)
                    if (col + q < N)
                        out[q] = acc[i][4 * j + q];
            }
        }
    }
}
