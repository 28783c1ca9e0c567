// HOSTILE oob_read_before_far: a block-per-row softmax with a temperature, y = softmax(x * t), where t is read from a
// "tensor header" the author's framework kept 2 MiB in front of the logits: x[-2^19]. Nothing was allocated there
// for this caller, so t is whatever those bytes hold (another buffer, a guard's NaN, zeros) or the read faults.
// EXPECT: status=failed (out_of_bounds_read, wrong_result or nan_or_inf from the value read; sanitizer_memcheck
// where compute-sanitizer runs and the value happened to do no harm) or error kernel_fault/worker_died if the
// address is unmapped. Never benchmarked.
// peak: entry=softmax_temp grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
#define BLOCK 256
#define WARPS (BLOCK / 32)
#define LOWEST (-3.402823466e38f)
#define HEADER_BEFORE (1 << 19)                                  // floats: 2 MiB

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
softmax_temp(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red_max[WARPS], red_sum[WARPS];
    const float t = x[-HEADER_BEFORE];                           // BUG: no header was allocated before x
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float* yr = y + (size_t)blockIdx.x * COLS;
    float m = LOWEST;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        m = fmaxf(m, xr[c] * t);
    m = block_reduce<true>(m, red_max);
    float s = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        s += __expf(xr[c] * t - m);
    const float inv = 1.0f / block_reduce<false>(s, red_sum);
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        yr[c] = __expf(xr[c] * t - m) * inv;
}
