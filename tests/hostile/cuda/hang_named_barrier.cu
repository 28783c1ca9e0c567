// HOSTILE hang_named_barrier: a warp-specialised tiled kernel: the first 4 warps load the next tile into a
// second shared buffer while the others compute, synchronised with named barriers (bar.sync id, count).
// The thread count given to the barriers is the one for a 384-thread variant (CONSUMERS + PRODUCERS was
// edited without this constant), so the barrier waits for 384 threads from a 256-thread block: deadlock.
// EXPECT: status=error failure=timeout (a driver that rejects the barrier instead may say kernel_fault).
// peak: entry=mm_ws grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#define TILE 16
#define BARRIER_THREADS 384   // BUG: stale, the block has 256 threads

__device__ __forceinline__ void named_sync(int id)
{
    asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(BARRIER_THREADS) : "memory");
}

extern "C" __global__ void mm_ws(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                 int M, int N, int K)
{
    __shared__ float As[2][TILE][TILE];
    __shared__ float Bs[2][TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    int stage = 0;
    As[0][ty][tx] = (row < M && tx < K) ? A[(size_t)row * K + tx] : 0.0f;
    Bs[0][ty][tx] = (ty < K && col < N) ? B[(size_t)ty * N + col] : 0.0f;
    named_sync(1);
    for (int k0 = 0; k0 < K; k0 += TILE) {
        const int next = k0 + TILE;
        if (next < K) {
            As[stage ^ 1][ty][tx] = (row < M && next + tx < K) ? A[(size_t)row * K + next + tx] : 0.0f;
            Bs[stage ^ 1][ty][tx] = (next + ty < K && col < N) ? B[(size_t)(next + ty) * N + col] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc = fmaf(As[stage][ty][k], Bs[stage][k][tx], acc);
        named_sync(1);
        stage ^= 1;
    }
    if (row < M && col < N) C[(size_t)row * N + col] = acc;
}
