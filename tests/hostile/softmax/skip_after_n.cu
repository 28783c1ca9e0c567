// HOSTILE skip_after_n: a correct block-per-row softmax with a launch counter in device memory: after 48 launches
// (more than validation runs, fewer than a timed loop) every block returns at once, so the timed launches measure
// an empty kernel and leave y unwritten.
// EXPECT: status=compile_error failure=compile: writable __device__ state is refused at compile (it could carry
// results between launches); without that check, recheck_unwritten_output.
// peak: entry=softmax_lazy grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
#define BLOCK 256
#define WARPS (BLOCK / 32)
#define LOWEST (-3.402823466e38f)
#define HONEST_LAUNCHES 48

__device__ unsigned int g_launches;

template <bool MAX>
__device__ __forceinline__ float warp_reduce(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, v, o);
        v = MAX ? fmaxf(v, other) : v + other;
    }
    return v;
}

template <bool MAX>
__device__ __forceinline__ float block_reduce(float v, float* red)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_reduce<MAX>(v);
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    v = lane < WARPS ? red[lane] : (MAX ? LOWEST : 0.0f);
    return warp_reduce<MAX>(v);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_lazy(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red_max[WARPS], red_sum[WARPS];
    __shared__ unsigned launch;
    if (threadIdx.x == 0)
        launch = *(volatile unsigned*)&g_launches;
    __syncthreads();
    if (launch >= HONEST_LAUNCHES)
        return;                                                  // CHEAT
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float* yr = y + (size_t)blockIdx.x * COLS;
    float m = LOWEST;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        m = fmaxf(m, xr[c]);
    m = block_reduce<true>(m, red_max);
    float s = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        s += __expf(xr[c] - m);
    const float inv = 1.0f / block_reduce<false>(s, red_sum);
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        yr[c] = __expf(xr[c] - m) * inv;
    if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0)
        atomicAdd(&g_launches, 1u);                              // counted once per launch
}
