// HOSTILE bf16_accumulate: a block-per-row softmax that keeps each thread's sum of exponentials in __nv_bfloat16
// ("bf16 has f32's range, so the sum cannot overflow, and it halves the registers"): 8 significant bits, so each
// partial sum is off by up to 2^-9 of itself and the row sum, and every output, by about as much.
// EXPECT: status=failed failure=wrong_result.
// peak: entry=softmax_bf16acc grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
#include <cuda_bf16.h>
#define BLOCK 256
#define WARPS (BLOCK / 32)
#define LOWEST (-3.402823466e38f)

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
softmax_bf16acc(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red_max[WARPS], red_sum[WARPS];
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float* yr = y + (size_t)blockIdx.x * COLS;
    float m = LOWEST;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        m = fmaxf(m, xr[c]);
    m = block_reduce<true>(m, red_max);
    __nv_bfloat16 s = __float2bfloat16(0.0f);                    // BUG: an 8-bit accumulator
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        s = __hadd(s, __float2bfloat16(__expf(xr[c] - m)));
    const float inv = 1.0f / block_reduce<false>(__bfloat162float(s), red_sum);
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        yr[c] = __expf(xr[c] - m) * inv;
}
