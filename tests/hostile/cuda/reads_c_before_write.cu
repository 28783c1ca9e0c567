// HOSTILE reads_c_before_write: a 16x16 tiled kernel that accumulates straight into C (C += partial per K tile)
// to "save a register", assuming C starts zeroed, which nothing promises. With a poisoned C the result is NaN;
// with a zeroed C it would be right.
// EXPECT: status=failed failure=nan_or_inf (a NaN of the kernel's making, from the poisoned output).
// peak: entry=mm_accum_c grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#define TILE 16

extern "C" __global__ void mm_accum_c(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                      int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
        float part = 0.0f;
#pragma unroll
        for (int k = 0; k < TILE; ++k) part = fmaf(As[ty][k], Bs[k][tx], part);
        if (row < M && col < N) C[(size_t)row * N + col] += part;   // BUG: reads C before anything wrote it
        __syncthreads();
    }
}
