// HOSTILE oob_read_after_far: a block-per-row softmax with an additive mask, y = softmax(x + mask), where the mask
// is read from where the author's attention kernel kept it, 16 MiB past the end of the logits: x[ROWS*COLS + 2^22 +
// i]. Nothing was allocated there for this caller: the mask is whatever those bytes hold (zeros would even give the
// right answer) or the read faults.
// EXPECT: status=failed (wrong_result, nan_or_inf or out_of_bounds_read from the values read; sanitizer_memcheck
// where compute-sanitizer runs and they did no harm) or error kernel_fault/worker_died if unmapped. Never
// benchmarked.
// peak: entry=softmax_mask grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
#define BLOCK 256
#define WARPS (BLOCK / 32)
#define LOWEST (-3.402823466e38f)
#define MASK_AFTER (1 << 22)                                     // floats: 16 MiB

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
softmax_mask(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red_max[WARPS], red_sum[WARPS];
    const size_t base = (size_t)blockIdx.x * COLS;
    const float* xr = x + base;
    const float* mask = x + (size_t)ROWS * COLS + MASK_AFTER + base;   // BUG: nothing was allocated there
    float* yr = y + base;
    float m = LOWEST;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        m = fmaxf(m, xr[c] + mask[c]);
    m = block_reduce<true>(m, red_max);
    float s = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        s += __expf(xr[c] + mask[c] - m);
    const float inv = 1.0f / block_reduce<false>(s, red_sum);
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        yr[c] = __expf(xr[c] + mask[c] - m) * inv;
}
