// HOSTILE persistent_queue_no_reset: a persistent 16x16 tiled kernel: 132 blocks take output tiles from a global
// work counter with atomicAdd until the tiles run out. Nothing resets the counter between launches, so the
// first launch is correct and every later launch finds the queue empty and writes nothing.
// EXPECT: status=failed failure=unwritten_output (the second launch of validation; today's code may say
// nondeterministic).
// peak: entry=mm_queue grid=(132, 1, 1) block=(16, 16, 1) shared=0
#define TILE 16

__device__ unsigned int g_next_tile;

extern "C" __global__ void mm_queue(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                    int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    __shared__ unsigned tile;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const unsigned tiles_n = (N + TILE - 1) / TILE, tiles = tiles_n * ((M + TILE - 1) / TILE);
    for (;;) {
        if (tx == 0 && ty == 0) tile = atomicAdd(&g_next_tile, 1u);   // BUG: never reset
        __syncthreads();
        const unsigned t = tile;
        if (t >= tiles) return;
        const int row = (t / tiles_n) * TILE + ty, col = (t % tiles_n) * TILE + tx;
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
    }
}
