// HOSTILE oob_write_before_far: a correct block-per-row softmax that keeps each row's max and sum in a "workspace"
// it takes to start 2 MiB before y (the author's framework allocated one there; this caller did not): block r writes
// y[r * 2 - 2^19] and y[r * 2 + 1 - 2^19], far before the output and past any guard in front of it.
// EXPECT: status=failed (sanitizer_memcheck where compute-sanitizer runs; out_of_bounds_write or input_modified if
// the words land in another buffer or its guard; wrong_result if they land in memory the validator reads) or error
// kernel_fault/worker_died if the address is unmapped. Never benchmarked.
// peak: entry=softmax_ws grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
#define BLOCK 256
#define WARPS (BLOCK / 32)
#define LOWEST (-3.402823466e38f)
#define WORKSPACE_BEFORE (1 << 19)                              // floats: 2 MiB

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
softmax_ws(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red_max[WARPS], red_sum[WARPS];
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float* yr = y + (size_t)blockIdx.x * COLS;
    float* workspace = y - WORKSPACE_BEFORE;                     // BUG: nothing was allocated there
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
    if (threadIdx.x == 0) {
        workspace[2 * blockIdx.x] = m;
        workspace[2 * blockIdx.x + 1] = s;
    }
}
