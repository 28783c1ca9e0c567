// HOSTILE counter_in_y_tail: the skip-after-n cheat without a __device__ variable: a correct block-per-row row sum
// that keeps its launch counter in the "slack" after the output, y[ROWS + 16]; after 48 launches every block
// returns at once and leaves y as it was. The counter is written on every launch, into y's after-guard.
// EXPECT: status=failed failure=out_of_bounds_write (after y), at the first validation launch.
// peak: entry=row_sum_tail grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
#define BLOCK 256
#define WARPS (BLOCK / 32)

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

extern "C" __global__ void __launch_bounds__(BLOCK)
row_sum_tail(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    __shared__ unsigned launch;
    volatile float* counter = y + ROWS + 16;                     // BUG: past the end of y
    if (threadIdx.x == 0) {
        const float seen = *counter;
        launch = (seen >= 0.0f && seen < 1e6f) ? (unsigned)seen : 0u;
    }
    __syncthreads();
    if (launch >= HONEST_LAUNCHES)
        return;                                                  // CHEAT
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        acc += xr[c];
    acc = block_sum(acc, red);
    if (threadIdx.x == 0) {
        y[blockIdx.x] = acc;
        if (blockIdx.x == gridDim.x - 1)
            *counter = (float)(launch + 1);
    }
}
