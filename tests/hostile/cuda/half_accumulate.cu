// HOSTILE half_accumulate: a 16x16 tiled kernel that stages tiles in f32 but accumulates each dot product in
// __half (hfma), "to use the doubled f16 FMA rate". Each sum keeps ~11 bits; the error grows with K.
// EXPECT: status=failed failure=wrong_result.
// peak: entry=mm_hacc grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#include <cuda_fp16.h>
#define TILE 16

extern "C" __global__ void mm_hacc(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                   int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    __half acc = __float2half(0.0f);                              // BUG: 11-bit accumulator
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc = __hfma(__float2half(As[ty][k]), __float2half(Bs[k][tx]), acc);
        __syncthreads();
    }
    if (row < M && col < N) C[(size_t)row * N + col] = __half2float(acc);
}
