// HOSTILE tile_multiple_only: a row-per-warp row sum (8 warps per block) that walks each row in whole 32-column
// tiles, one column per lane (c0 + 32 <= COLS), and has no step for a partial last tile: exact when COLS is a
// multiple of 32; otherwise every row's last COLS % 32 elements are left out of its sum.
// EXPECT at 256x1024: benchmarked, but generality.passed == false and head does not move.
// EXPECT at 100x77: status=failed failure=wrong_result.
// peak: entry=row_sum_tiles grid=(cdiv(ROWS, 8), 1, 1) block=(256, 1, 1) shared=0
#define WARPS 8

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void __launch_bounds__(32 * WARPS)
row_sum_tiles(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * WARPS + threadIdx.x / 32;
    if (row >= ROWS)
        return;
    const float* xr = x + (size_t)row * COLS;
    float acc = 0.0f;
    for (int c0 = 0; c0 + 32 <= COLS; c0 += 32)                  // BUG: whole tiles only
        acc += xr[c0 + lane];
    acc = warp_sum(acc);
    if (lane == 0)
        y[row] = acc;
}
