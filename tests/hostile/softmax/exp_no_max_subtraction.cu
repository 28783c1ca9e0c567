// HOSTILE exp_no_max_subtraction: a two-pass block-per-row softmax that skips the max pass: y = __expf(x) /
// sum(__expf(x)) ("the max pass is a third of the memory traffic, and logits are small"). Exact for small inputs;
// for logits past ~88 __expf overflows to Inf and the row becomes NaN (Inf / Inf), and rows of large negative
// values sum to 0. A softmax must hold for any finite row; one validated only on inputs in [-4, 4] never sees it.
// EXPECT: status=failed, failure nan_or_inf or wrong_result: a validator must try rows with large values.
// peak: entry=softmax_nomax grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
#define BLOCK 256
#define WARPS (BLOCK / 32)

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_nomax(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float* yr = y + (size_t)blockIdx.x * COLS;
    float s = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        s += __expf(xr[c]);                                      // BUG: no max subtracted
    s = warp_sum(s);
    if (lane == 0)
        red[warp] = s;
    __syncthreads();
    const float inv = 1.0f / warp_sum(lane < WARPS ? red[lane] : 0.0f);
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        yr[c] = __expf(xr[c]) * inv;
}
