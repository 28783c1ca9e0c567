// Shared-memory tiling: each TILE x TILE block stages TILE x TILE tiles of A and B in shared memory, so every
// element loaded from global memory is reused TILE times. Works for any M, N, K (out-of-range tile elements are zero).
// peak: entry=matmul_tiled grid=(cdiv(N, TILE), cdiv(M, TILE), 1) block=(TILE, TILE, 1) shared=0
// peak: params TILE=[32, 16, 8]

extern "C" __global__ void matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k)
            acc += As[ty][k] * Bs[k][tx];  // As: broadcast within a warp; Bs: consecutive tx, no conflicts
        __syncthreads();
    }
    if (row < M && col < N)
        C[row * N + col] = acc;
}
