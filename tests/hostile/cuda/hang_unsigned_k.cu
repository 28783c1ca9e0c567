// HOSTILE hang_unsigned_k: a 16x16 shared-memory tiled kernel that walks the K tiles backwards (so a block
// starts on the tiles its left neighbour touched last, warm in L2). The tile index is unsigned, so
// `k0 >= 0` is always true: after tile 0 it wraps to ~4e9, every load is masked to zero by the edge
// guards and the loop (with its barriers) never ends.
// EXPECT: status=error failure=timeout; the worker is replaced and the next good kernel benchmarks.
// peak: entry=mm_rev grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#define TILE 16

extern "C" __global__ void mm_rev(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                  int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    const unsigned last = (unsigned)(K - 1) / TILE * TILE;
    for (unsigned k0 = last; k0 >= 0; k0 -= TILE) {          // BUG: unsigned, never negative
        As[ty][tx] = (row < M && k0 + tx < (unsigned)K) ? A[(size_t)row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < (unsigned)K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc = fmaf(As[ty][k], Bs[k][tx], acc);
        __syncthreads();
    }
    if (row < M && col < N) C[(size_t)row * N + col] = acc;
}
