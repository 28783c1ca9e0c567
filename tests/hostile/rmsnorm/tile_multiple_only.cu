// HOSTILE tile_multiple_only: a row-per-warp RMS norm (8 warps, so 8 rows per block; shuffles only, no barrier)
// launched on ROWS / 8 blocks, rounded down, with no row guard: exact when ROWS is a multiple of 8, the last
// ROWS % 8 rows never written otherwise (and no block at all below 8 rows).
// EXPECT at 256x1024: benchmarked, but generality.passed == false and head does not move.
// EXPECT at 100x77: status=failed failure=unwritten_output.
// peak: entry=rmsnorm_rows8 grid=(ROWS // 8, 1, 1) block=(256, 1, 1) shared=0
#define WARPS 8
#define EPS 1e-6f

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void __launch_bounds__(32 * WARPS)
rmsnorm_rows8(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int ROWS, int COLS)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * WARPS + threadIdx.x / 32;      // BUG: the grid covers (ROWS / 8) * 8 rows
    const float* xr = x + (size_t)row * COLS;
    float* yr = y + (size_t)row * COLS;
    float ss = 0.0f;
    for (int c = lane; c < COLS; c += 32)
        ss += xr[c] * xr[c];
    const float r = rsqrtf(warp_sum(ss) / COLS + EPS);
    for (int c = lane; c < COLS; c += 32)
        yr[c] = xr[c] * r * w[c];
}
