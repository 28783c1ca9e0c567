// HOSTILE bf16_accumulate: a block-per-row row sum that keeps each thread's running sum in __nv_bfloat16 ("bf16 has
// f32's range, and the sum is reduced in f32 afterwards anyway"): 8 significant bits per partial, so each row sum
// is off by far more than f32 rounding allows.
// EXPECT: status=failed failure=wrong_result.
// peak: entry=row_sum_bf16acc grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
#include <cuda_bf16.h>
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
row_sum_bf16acc(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    const float* xr = x + (size_t)blockIdx.x * COLS;
    __nv_bfloat16 acc = __float2bfloat16(0.0f);                  // BUG: an 8-bit accumulator
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        acc = __hadd(acc, __float2bfloat16(xr[c]));
    const float total = block_sum(__bfloat162float(acc), red);
    if (threadIdx.x == 0)
        y[blockIdx.x] = total;
}
