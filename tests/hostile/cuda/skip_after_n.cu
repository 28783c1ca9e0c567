// HOSTILE skip_after_n: a correct 16x16 tiled kernel with a launch counter in device memory: after 48 launches
// (more than any validation runs, fewer than a warm-up) every block returns at once, so the timed loop
// measures an empty kernel. The output of the timed launches is never written.
// EXPECT: status=failed failure=recheck_unwritten_output.
// peak: entry=mm_lazy grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#define TILE 16
#define HONEST_LAUNCHES 48

__device__ unsigned int g_launches;

extern "C" __global__ void mm_lazy(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                   int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    __shared__ unsigned launch;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const bool last_block = blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1;
    if (tx == 0 && ty == 0) launch = *(volatile unsigned*)&g_launches;
    __syncthreads();
    if (launch >= HONEST_LAUNCHES) return;                     // CHEAT
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
    if (last_block && tx == 0 && ty == 0) atomicAdd(&g_launches, 1u);   // counted once per launch
}
