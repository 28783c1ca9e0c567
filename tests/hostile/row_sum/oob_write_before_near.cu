// HOSTILE oob_write_before_near: a correct block-per-row row sum that also counts finished rows, for a follow-up pass
// that waits on them, in a word it believes the caller reserved just before y: atomicAdd(&y[-1], 1). Every block
// adds to the 4 bytes before the output.
// EXPECT: status=failed failure=out_of_bounds_write (before y).
// peak: entry=row_sum_done grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
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

extern "C" __global__ void __launch_bounds__(BLOCK)
row_sum_done(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        acc += xr[c];
    acc = block_sum(acc, red);
    if (threadIdx.x == 0) {
        y[blockIdx.x] = acc;
        atomicAdd(reinterpret_cast<unsigned*>(y) - 1, 1u);      // BUG: the counter is before y
    }
}
