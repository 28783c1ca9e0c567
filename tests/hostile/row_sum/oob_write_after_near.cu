// HOSTILE oob_write_after_near: a row-per-warp row sum (8 warps per block, shuffles only) launched on ROWS / 8 + 1
// blocks ("one more for the remainder") with the row guard written `row > ROWS` instead of `row >= ROWS`: the warp
// that gets row ROWS sums a phantom row past the end of x and stores it at y[ROWS], just past the output.
// EXPECT: status=failed failure=out_of_bounds_write (after y).
// peak: entry=row_sum_rpw grid=(ROWS // 8 + 1, 1, 1) block=(256, 1, 1) shared=0
#define WARPS 8

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void __launch_bounds__(32 * WARPS)
row_sum_rpw(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * WARPS + threadIdx.x / 32;
    if (row > ROWS)                                              // BUG: lets row ROWS through
        return;
    const float* xr = x + (size_t)row * COLS;
    float acc = 0.0f;
    for (int c = lane; c < COLS; c += 32)
        acc += xr[c];
    acc = warp_sum(acc);
    if (lane == 0)
        y[row] = acc;
}
