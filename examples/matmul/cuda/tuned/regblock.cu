// 2-D register blocking with its tile sizes as tuning parameters (catalog: register-blocking-2d). A block of
// (BM/TM)*(BN/TN) threads computes a BM x BN tile of C; each thread keeps TM x TN accumulators in registers, for
// the rows ty + i*(BM/TM) and columns tx + j*(BN/TN): strided, so that a warp's shared reads of B and its stores of C
// are consecutive addresses (no bank conflicts, coalesced). K advances BK at a time through shared memory, A's tile
// stored transposed (one padding column keeps the transposing stores off a single bank). Loads are scalar and
// guarded, so any M, N, K works and no parameter needs to divide another.
// peak: entry=matmul_rb grid=(cdiv(N, BN), cdiv(M, BM), 1) block=((BM // TM) * (BN // TN), 1, 1) shared=0
// peak: params BM=[128, 64, 256] BN=[128, 64, 256] BK=[8, 16, 32] TM=[8, 4, 16] TN=[8, 4, 16]
// peak: where=(BM // TM) * (BN // TN) >= 64 and (BM // TM) * (BN // TN) <= 1024 and TM * TN <= 128
// peak: where=(BM + 1 + BN) * BK * 4 <= 49152
#define NT ((BM / TM) * (BN / TN))

extern "C" __global__ void __launch_bounds__(NT) matmul_rb(const float* A, const float* B, float* C,
                                                           int M, int N, int K)
{
    __shared__ float As[BK][BM + 1];  // transposed: As[k][m]
    __shared__ float Bs[BK][BN];
    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN), ty = tid / (BN / TN);
    const int rowBase = blockIdx.y * BM, colBase = blockIdx.x * BN;

    float acc[TM][TN] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        // k fastest for A (a row's BK values are contiguous in global memory), n fastest for B.
        for (int e = tid; e < BM * BK; e += NT) {
            const int m = e / BK, k = e % BK;
            const int row = rowBase + m, col = k0 + k;
            As[k][m] = (row < M && col < K) ? A[(size_t)row * K + col] : 0.0f;
        }
        for (int e = tid; e < BK * BN; e += NT) {
            const int k = e / BN, n = e % BN;
            const int row = k0 + k, col = colBase + n;
            Bs[k][n] = (row < K && col < N) ? B[(size_t)row * N + col] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i)
                a[i] = As[k][ty + i * (BM / TM)];
#pragma unroll
            for (int j = 0; j < TN; ++j)
                b[j] = Bs[k][tx + j * (BN / TN)];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j)
                    acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = rowBase + ty + i * (BM / TM);
        if (row >= M)
            break;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int col = colBase + tx + j * (BN / TN);
            if (col < N)
                C[(size_t)row * N + col] = acc[i][j];
        }
    }
}
