// HOSTILE oob_write_before_near: a correct 16x16 tiled kernel whose epilogue also publishes a "tile done" word
// for a split-K fix-up pass. The flag for tile t lives at C[t*TILE*TILE - 1] (the author meant a separate flag
// array laid out before each tile), so block (0, 0) writes C[-1]: 4 bytes before the output buffer.
// EXPECT: status=failed failure=out_of_bounds_write (before C).
// peak: entry=mm_flag grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#define TILE 16

extern "C" __global__ void mm_flag(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
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
    if (row < M && col < N) C[(size_t)row * N + col] = acc;
    if (tx == 0 && ty == 0 && blockIdx.x == 0 && blockIdx.y == 0) {
        const long long tile = (long long)blockIdx.y * gridDim.x + blockIdx.x;
        C[tile * TILE * TILE - 1] = 1.0f;                      // BUG: C[-1] for tile 0
    }
}
