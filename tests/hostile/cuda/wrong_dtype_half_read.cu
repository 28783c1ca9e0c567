// HOSTILE wrong_dtype_half_read: a kernel written for an f16 session (half inputs, f32 accumulation, half2
// loads) submitted to an f32 session: it reads A and B as __half, so it multiplies the halves of f32 bit
// patterns (only the first half of each buffer is even touched).
// EXPECT: status=failed, failure wrong_result (or nan_or_inf when a half bit pattern is Inf/NaN).
// peak: entry=mm_h grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#include <cuda_fp16.h>
#define TILE 16

extern "C" __global__ void mm_h(const __half* __restrict__ A, const __half* __restrict__ B, float* __restrict__ C,
                                int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (row < M && k0 + tx < K) ? __half2float(A[(size_t)row * K + k0 + tx]) : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? __half2float(B[(size_t)(k0 + ty) * N + col]) : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc = fmaf(As[ty][k], Bs[k][tx], acc);
        __syncthreads();
    }
    if (row < M && col < N) C[(size_t)row * N + col] = acc;
}
