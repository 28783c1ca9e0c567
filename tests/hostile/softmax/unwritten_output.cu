// HOSTILE unwritten_output: the row-per-warp softmax (examples/softmax/cuda/5_row_per_warp.cu's shape: one warp per
// row, shuffles only) with 6 warps per block ("192 threads: 10 blocks fit per SM") and a grid of ROWS / 6 blocks,
// rounded down. The last ROWS % 6 rows belong to no warp and are never written: 4 rows at 256 and at 100.
// EXPECT: status=failed failure=unwritten_output.
// peak: entry=softmax_w6 grid=(ROWS // 6, 1, 1) block=(192, 1, 1) shared=0
#define WARPS 6
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
softmax_w6(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * WARPS + threadIdx.x / 32;     // BUG: the grid covers (ROWS / 6) * 6 rows
    if (row >= ROWS)
        return;
    const float* xr = x + (size_t)row * COLS;
    float* yr = y + (size_t)row * COLS;
    float m = LOWEST;
    for (int c = lane; c < COLS; c += 32)
        m = fmaxf(m, xr[c]);
    m = warp_max(m);
    float s = 0.0f;
    for (int c = lane; c < COLS; c += 32)
        s += __expf(xr[c] - m);
    const float inv = 1.0f / warp_sum(s);
    for (int c = lane; c < COLS; c += 32)
        yr[c] = __expf(xr[c] - m) * inv;
}
