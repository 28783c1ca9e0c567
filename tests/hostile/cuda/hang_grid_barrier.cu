// HOSTILE hang_grid_barrier: a tiled kernel with a "publish then fix up" epilogue: every block stores its tile,
// bumps a global arrival counter and waits until all blocks have arrived before a (no-op here) fix-up pass.
// The target is counted in threads (gridDim * blockDim) while the counter counts blocks, so it is never
// reached and every block spins forever on a volatile load.
// EXPECT: status=error failure=timeout; the worker is replaced and the next good kernel benchmarks.
// peak: entry=mm_fixup grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#define TILE 16

__device__ unsigned int g_arrived;

extern "C" __global__ void mm_fixup(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
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
    __threadfence();
    __syncthreads();
    if (tx == 0 && ty == 0) {
        atomicAdd(&g_arrived, 1u);
        const unsigned target = gridDim.x * gridDim.y * blockDim.x * blockDim.y;   // BUG: threads, not blocks
        while (*(volatile unsigned*)&g_arrived < target) { __nanosleep(100); }
    }
    __syncthreads();
}
