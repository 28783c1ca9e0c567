// Portable HIP: shared-memory (LDS) tiling that assumes no wave size, so it runs on AMD (wave64) and, through the
// CUDA device header, on NVIDIA (warp32). Each 16x16 workgroup stages 16x16 tiles of A and B, reusing every loaded
// element 16 times. Works for any M, N, K (out-of-range tile elements are zero).
// peak: entry=matmul_tiled grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#include <hip/hip_runtime.h>

#define TILE 16

extern "C" __global__ void __launch_bounds__(TILE * TILE)
matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k)
            acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N)
        C[(size_t)row * N + col] = acc;
}
