// HOSTILE half2_accumulate: a block-per-row RMS norm that squares and sums pairs of columns in __half2 with __hfma2
// ("the doubled f16 FMA rate"): each thread's running sum of squares keeps 11 bits, so r, and every output, is off
// by about 2^-12 relative - thousands of f32 roundings.
// EXPECT: status=failed failure=wrong_result.
// peak: entry=rmsnorm_h2 grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
#include <cuda_fp16.h>
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

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_h2(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float* yr = y + (size_t)blockIdx.x * COLS;
    __half2 acc = __float2half2_rn(0.0f);                        // BUG: an 11-bit accumulator
    for (int c = 2 * threadIdx.x; c < COLS; c += 2 * BLOCK) {
        const __half2 v = __floats2half2_rn(xr[c], c + 1 < COLS ? xr[c + 1] : 0.0f);
        acc = __hfma2(v, v, acc);
    }
    const float ss = __low2float(acc) + __high2float(acc);
    const float r = rsqrtf(block_sum(ss, red) / COLS + EPS);
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        yr[c] = xr[c] * r * w[c];
}
