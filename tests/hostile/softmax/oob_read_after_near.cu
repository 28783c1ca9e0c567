// HOSTILE oob_read_after_near: a row-per-warp softmax (8 warps per block, shuffles only) whose sum pass runs to
// `c <= COLS`: every row adds exp of the next row's first element, and the last row reads one element past the end
// of x. With NaN guards around x the last row comes out NaN; with zero guards it comes out finite but wrong.
// EXPECT: status=failed failure=out_of_bounds_read.
// peak: entry=softmax_rpw grid=(cdiv(ROWS, 8), 1, 1) block=(256, 1, 1) shared=0
#define WARPS 8
#define LOWEST (-3.402823466e38f)

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void __launch_bounds__(32 * WARPS)
softmax_rpw(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * WARPS + threadIdx.x / 32;
    if (row >= ROWS)
        return;                                                  // the whole warp: rows are per warp
    const float* xr = x + (size_t)row * COLS;
    float* yr = y + (size_t)row * COLS;
    float m = LOWEST;
    for (int c = lane; c < COLS; c += 32)
        m = fmaxf(m, xr[c]);
    m = warp_max(m);
    float s = 0.0f;
    for (int c = lane; c <= COLS; c += 32)                       // BUG: one past the row
        s += __expf(xr[c] - m);
    const float inv = 1.0f / warp_sum(s);
    for (int c = lane; c < COLS; c += 32)
        yr[c] = __expf(xr[c] - m) * inv;
}
