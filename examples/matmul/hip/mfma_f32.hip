// AMD matrix cores for f32 (CDNA: gfx908, gfx90a, gfx94x): v_mfma_f32_16x16x4f32 multiplies in full FP32.
// 256 threads = 4 waves of 64 as 2 x 2; block tile 128 x 128, wave tile 64 x 64 = 4 x 4 MFMA tiles of 16 x 16.
// Lane l of a wave: r = l % 16, q = l / 16; per MFMA it supplies A[r][q] and B[q][r] of a 16 x 4 x 16 step and
// holds C[4q + e][r] in accumulator element e. AMD only: the HIP backend refuses it for NVIDIA.
// Works for any M, N, K: tiles are zero-filled outside A and B, stores are guarded.
// peak: entry=matmul_mfma grid=(cdiv(N, 128), cdiv(M, 128), 1) block=(256, 1, 1) shared=0
#include <hip/hip_runtime.h>

#define BM 128
#define BN 128
#define BK 16
#define WAVE 64
#define THREADS 256

typedef float floatx4 __attribute__((ext_vector_type(4)));

extern "C" __global__ void __launch_bounds__(THREADS)
matmul_mfma(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float As[BM][BK + 1];  // A[m][k]; the pad keeps the 16 rows a wave reads in distinct banks
    __shared__ float Bt[BN][BK + 1];  // B transposed, Bt[n][k], so B fragments read like A fragments
    const int tid = threadIdx.x, wave = tid / WAVE, lane = tid % WAVE;
    const int wm = wave / 2, wn = wave % 2, r = lane % 16, q = lane / 16;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    floatx4 acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
            acc[i][j] = floatx4{0.0f, 0.0f, 0.0f, 0.0f};

    for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int p = 0; p < BM * BK / THREADS; ++p) {  // coalesced along k
            const int idx = p * THREADS + tid, row = idx / BK, col = idx % BK;
            const int gm = m0 + row, gk = k0 + col;
            As[row][col] = (gm < M && gk < K) ? A[(size_t)gm * K + gk] : 0.0f;
        }
#pragma unroll
        for (int p = 0; p < BK * BN / THREADS; ++p) {  // coalesced along n, transposed on the LDS store
            const int idx = p * THREADS + tid, krow = idx / BN, col = idx % BN;
            const int gk = k0 + krow, gn = n0 + col;
            Bt[col][krow] = (gk < K && gn < N) ? B[(size_t)gk * N + gn] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 4) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = As[wm * 64 + i * 16 + r][kk + q];
#pragma unroll
            for (int j = 0; j < 4; ++j) b[j] = Bt[wn * 64 + j * 16 + r][kk + q];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    acc[i][j] = __builtin_amdgcn_mfma_f32_16x16x4f32(a[i], b[j], acc[i][j], 0, 0, 0);
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int col = n0 + wn * 64 + j * 16 + r;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int row = m0 + wm * 64 + i * 16 + 4 * q + e;
                if (row < M && col < N) C[(size_t)row * N + col] = acc[i][j][e];
            }
        }
}
