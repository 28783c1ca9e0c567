// HOSTILE skip_after_n: a correct block-per-row RMS norm with a launch counter in device memory: after 48 launches
// every block returns at once, so the timed launches measure an empty kernel and leave y unwritten.
// EXPECT: status=compile_error failure=compile: writable __device__ state is refused at compile; without that
// check, recheck_unwritten_output.
// peak: entry=rmsnorm_lazy grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
#define BLOCK 256
#define WARPS (BLOCK / 32)
#define EPS 1e-6f

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float block_sum(float v, float* red)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_sum(v);
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    return warp_sum(lane < WARPS ? red[lane] : 0.0f);
}
#define HONEST_LAUNCHES 48

__device__ unsigned int g_launches;

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_lazy(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    __shared__ unsigned launch;
    if (threadIdx.x == 0)
        launch = *(volatile unsigned*)&g_launches;
    __syncthreads();
    if (launch >= HONEST_LAUNCHES)
        return;                                                  // CHEAT
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float* yr = y + (size_t)blockIdx.x * COLS;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        ss += xr[c] * xr[c];
    const float r = rsqrtf(block_sum(ss, red) / COLS + EPS);
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        yr[c] = xr[c] * r * w[c];
    if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0)
        atomicAdd(&g_launches, 1u);
}
