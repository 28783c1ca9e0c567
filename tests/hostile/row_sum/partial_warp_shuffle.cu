// HOSTILE partial_warp_shuffle: a row sum for short rows with a half warp (16 lanes) per row, two rows per warp and
// 16 rows per block of 256, whose butterfly is still the full-warp one (xor 16, 8, 4, 2, 1): the xor-16 step adds
// the other half's row, so both rows of every warp get the sum of the two.
// EXPECT: status=failed failure=wrong_result.
// peak: entry=row_sum_half grid=(cdiv(ROWS, 16), 1, 1) block=(256, 1, 1) shared=0
#define LANES 16

extern "C" __global__ void __launch_bounds__(256)
row_sum_half(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    const int sub = threadIdx.x % LANES;
    const int row = blockIdx.x * (256 / LANES) + threadIdx.x / LANES;
    const bool live = row < ROWS;                                // no early return: the shuffles need every lane
    float acc = 0.0f;
    if (live)
        for (int c = sub; c < COLS; c += LANES)
            acc += x[(size_t)row * COLS + c];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)                             // BUG: a row spans 16 lanes: start at o = 8
        acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (live && sub == 0)
        y[row] = acc;
}
