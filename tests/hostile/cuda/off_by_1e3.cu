// HOSTILE off_by_1e3: a correct 16x16 tiled kernel except for one output element, C[M/2][N/3], which comes out
// 1e-3 too large (a stray bias from a half-removed epilogue). The relative L2 error over the whole matrix is
// tiny; only an elementwise bound that scales with K and the input magnitudes catches it.
// EXPECT: status=failed failure=wrong_result (at 128^3, 256^3 and 100x77x53 alike).
// peak: entry=mm_bias grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#define TILE 16

extern "C" __global__ void mm_bias(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                   int M, int N, int K)
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
        for (int k = 0; k < TILE; ++k) acc = fmaf(As[ty][k], Bs[k][tx], acc);
        __syncthreads();
    }
    if (row == M / 2 && col == N / 3) acc += 1e-3f;             // BUG: one element off
    if (row < M && col < N) C[(size_t)row * N + col] = acc;
}
