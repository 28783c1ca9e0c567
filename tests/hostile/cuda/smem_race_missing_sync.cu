// HOSTILE smem_race_missing_sync: a 32x32-tile kernel with 4 rows per thread (block 32x8), where the barrier
// between staging a tile in shared memory and reading it was dropped ("the loads are by rows, each warp reads
// what it wrote" - not true for Bs, whose columns come from all 8 warps). Warps read tiles other warps are still
// writing, or the previous tile: the result depends on warp scheduling.
// EXPECT: status=failed, failure one of wrong_result / nondeterministic / sanitizer_racecheck.
// peak: entry=mm_race grid=(cdiv(N, 32), cdiv(M, 32), 1) block=(32, 8, 1) shared=0
#define TILE 32
#define ROWS 4

extern "C" __global__ void mm_race(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                   int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc[ROWS] = {0.f, 0.f, 0.f, 0.f};
    for (int k0 = 0; k0 < K; k0 += TILE) {
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
            const int r = row0 + 8 * i, kb = k0 + ty + 8 * i;
            As[ty + 8 * i][tx] = (r < M && k0 + tx < K) ? A[(size_t)r * K + k0 + tx] : 0.0f;
            Bs[ty + 8 * i][tx] = (kb < K && col < N) ? B[(size_t)kb * N + col] : 0.0f;
        }
        // BUG: missing __syncthreads() here
#pragma unroll
        for (int k = 0; k < TILE; ++k) {
            const float b = Bs[k][tx];
#pragma unroll
            for (int i = 0; i < ROWS; ++i) acc[i] = fmaf(As[ty + 8 * i][k], b, acc[i]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
        const int r = row0 + 8 * i;
        if (r < M && col < N) C[(size_t)r * N + col] = acc[i];
    }
}
