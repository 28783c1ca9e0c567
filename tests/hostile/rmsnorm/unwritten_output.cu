// HOSTILE unwritten_output: a block-per-row RMS norm (warp shuffles, one shared exchange) in which warp 0 folds the
// warps' partial sums, and the normalisation loop ended up inside warp 0's braces: only threads 0-31 write, so of
// every 256 columns only the first 32 are ever stored.
// EXPECT: status=failed failure=unwritten_output.
// peak: entry=rmsnorm_w0 grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
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

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_w0(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float* yr = y + (size_t)blockIdx.x * COLS;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        ss += xr[c] * xr[c];
    ss = warp_sum(ss);
    if (lane == 0)
        red[warp] = ss;
    __syncthreads();
    if (warp == 0) {
        const float r = rsqrtf(warp_sum(lane < WARPS ? red[lane] : 0.0f) / COLS + EPS);
        for (int c = threadIdx.x; c < COLS; c += BLOCK)          // BUG: inside warp 0's branch
            yr[c] = xr[c] * r * w[c];
    }
}
