// HOSTILE oob_write_before_near: a block-per-row softmax (warp-shuffle block reductions, as examples/softmax/cuda/
// 2_warp_shuffle.cu) that also stores each row's log-sum-exp "for the backward pass" in a stats column the author
// believed precedes every row: yr[-1]. For row 0 that is y[-1], 4 bytes before the output; for the others it is
// the previous row's last element, which that row's block writes too (whichever comes last wins).
// EXPECT: status=failed failure=out_of_bounds_write (before y).
// peak: entry=softmax_lse grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
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
softmax_lse(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red_max[WARPS], red_sum[WARPS];
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float* yr = y + (size_t)blockIdx.x * COLS;
    float m = LOWEST;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        m = fmaxf(m, xr[c]);
    m = block_reduce<true>(m, red_max);
    float s = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        s += __expf(xr[c] - m);
    s = block_reduce<false>(s, red_sum);
    const float inv = 1.0f / s;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        yr[c] = __expf(xr[c] - m) * inv;
    if (threadIdx.x == 0)
        yr[-1] = m + __logf(s);                                 // BUG: the "stats column" is before the row
}
