// HOSTILE bf16_accumulate: a 16x16 tiled kernel that keeps the running sum in __nv_bfloat16 (8-bit mantissa)
// between K tiles to halve register pressure; each tile's partial product is computed in f32 and then rounded
// into the bf16 accumulator.
// EXPECT: status=failed failure=wrong_result.
// peak: entry=mm_bacc grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#include <cuda_bf16.h>
#define TILE 16

extern "C" __global__ void mm_bacc(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                   int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    __nv_bfloat16 acc = __float2bfloat16(0.0f);                   // BUG: 8-bit accumulator
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
        float part = 0.0f;
#pragma unroll
        for (int k = 0; k < TILE; ++k) part = fmaf(As[ty][k], Bs[k][tx], part);
        acc = __float2bfloat16(__bfloat162float(acc) + part);
        __syncthreads();
    }
    if (row < M && col < N) C[(size_t)row * N + col] = __bfloat162float(acc);
}
