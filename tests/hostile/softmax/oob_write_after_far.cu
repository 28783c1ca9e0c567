// HOSTILE oob_write_after_far: a correct block-per-row softmax that leaves a debug word, the last row's sum, 16 MiB
// past the end of y (y[ROWS*COLS + 2^22]), written by one thread of the last block only: past any guard, so it
// rarely faults and silently corrupts whatever allocation lies there.
// EXPECT: status=failed (sanitizer_memcheck where compute-sanitizer runs; else an out-of-bounds or input_modified
// verdict, or wrong_result, wherever it lands) or error kernel_fault/worker_died if unmapped. Never benchmarked.
// peak: entry=softmax_dbg grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
#define BLOCK 256
#define WARPS (BLOCK / 32)
#define LOWEST (-3.402823466e38f)
#define DEBUG_AFTER (1 << 22)                                    // floats: 16 MiB

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
softmax_dbg(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
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
    if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0)
        y[(size_t)ROWS * COLS + DEBUG_AFTER] = s;               // BUG: far past y
}
