// Portable HIP warp functions: each row of 32 lanes computes one element of C, every lane summing a strided
// slice of K, then a butterfly of mask-free __shfl_xor (width 32, so the same on 32-lane warps and 64-lane
// waves) adds the partial sums. Slow (no reuse); it exercises HIP's warp API on every platform.
// Rows stride over grid y (at most 65,535 blocks there), so any M launches.
// peak: entry=matmul_warp grid=(cdiv(N, 8), min(M, 65535), 1) block=(32, 8, 1) shared=0
#include <hip/hip_runtime.h>

#define LANES 32

extern "C" __global__ void matmul_warp(const float* A, const float* B, float* C, int M, int N, int K)
{
    const int lane = hipThreadIdx_x;
    const int col = hipBlockIdx_x * hipBlockDim_y + hipThreadIdx_y;
    if (col >= N) return;  // a whole row of 32 lanes leaves together, so every shuffle below has all its lanes
    for (int row = hipBlockIdx_y; row < M; row += hipGridDim_y) {
        float acc = 0.0f;
        for (int k = lane; k < K; k += LANES)
            acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
#pragma unroll
        for (int offset = LANES / 2; offset > 0; offset /= 2)
            acc += __shfl_xor(acc, offset, LANES);
        if (lane == 0)
            C[(size_t)row * N + col] = acc;
    }
}
