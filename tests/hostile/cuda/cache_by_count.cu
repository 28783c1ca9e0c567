// HOSTILE cache_by_count: a correct 16x16 tiled kernel that also saves its output in a device-side copy; after
// 48 launches (past validation) it stops computing and copies the saved result into C. Against one input
// set the copy is right and the "kernel" is a memcpy; when the timed loop rotates input sets the copy
// belongs to the wrong set.
// EXPECT: status=failed failure=recheck_wrong_result (rotating input sets; impossible_speed at large sizes).
// peak: entry=mm_memo grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#define TILE 16
#define HONEST_LAUNCHES 48
#define CACHE_ELEMS (1 << 22)

__device__ unsigned int g_launches;
__device__ float g_saved[CACHE_ELEMS];

extern "C" __global__ void mm_memo(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                   int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    __shared__ unsigned launch;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    const bool fits = (long long)M * N <= CACHE_ELEMS;
    if (tx == 0 && ty == 0) launch = *(volatile unsigned*)&g_launches;
    __syncthreads();
    if (fits && launch >= HONEST_LAUNCHES) {                   // CHEAT: replay the saved result
        if (row < M && col < N) C[(size_t)row * N + col] = g_saved[(size_t)row * N + col];
        return;
    }
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc = fmaf(As[ty][k], Bs[k][tx], acc);
        __syncthreads();
    }
    if (row < M && col < N) {
        C[(size_t)row * N + col] = acc;
        if (fits) g_saved[(size_t)row * N + col] = acc;
    }
    if (blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1 && tx == 0 && ty == 0) atomicAdd(&g_launches, 1u);
}
