// HOSTILE oob_read_after_near: a block-per-row RMS norm whose sum of squares takes two columns per step
// (c = 2 * tid, 2 * tid + 1, then + 2 * BLOCK) with no remainder step: when COLS is odd the last pair runs one past
// the row, into the next row's first element, and for the last row one past the end of x. Exact when COLS is even.
// EXPECT at 256x1024: status=failed failure=sanitizer_memcheck (compute-sanitizer at the sampled 100x77 sees the
// read past x; the sampled odd sizes alone would only make it not_general).
// EXPECT at 100x77: status=failed failure=out_of_bounds_read.
// peak: entry=rmsnorm_pairs grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
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
rmsnorm_pairs(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float* yr = y + (size_t)blockIdx.x * COLS;
    float ss = 0.0f;
    for (int c = 2 * threadIdx.x; c < COLS; c += 2 * BLOCK) {   // BUG: xr[c + 1] is past the row for odd COLS
        const float a = xr[c], b = xr[c + 1];
        ss += a * a + b * b;
    }
    const float r = rsqrtf(block_sum(ss, red) / COLS + EPS);
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        yr[c] = xr[c] * r * w[c];
}
