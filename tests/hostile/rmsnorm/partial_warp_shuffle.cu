// HOSTILE partial_warp_shuffle: an RMS norm for short rows with 8 lanes per row (4 rows per warp, 32 rows per block
// of 256) whose butterfly is the full-warp one, xor 16, 8, 4, 2, 1, kept from the warp-per-row kernel: the steps
// xor 16 and xor 8 cross into the other rows of the warp, so each row is normalised by the sum of squares of all
// four rows of its warp.
// EXPECT: status=failed failure=wrong_result.
// peak: entry=rmsnorm_8lanes grid=(cdiv(ROWS, 32), 1, 1) block=(256, 1, 1) shared=0
#define LANES 8
#define EPS 1e-6f

extern "C" __global__ void __launch_bounds__(256)
rmsnorm_8lanes(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int ROWS, int COLS)
{
    const int sub = threadIdx.x % LANES;
    const int row = blockIdx.x * (256 / LANES) + threadIdx.x / LANES;
    const bool live = row < ROWS;                                // no early return: the shuffles need every lane
    const float* xr = x + (size_t)row * COLS;
    float ss = 0.0f;
    if (live)
        for (int c = sub; c < COLS; c += LANES)
            ss += xr[c] * xr[c];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)                             // BUG: a row spans 8 lanes: start at o = 4
        ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float r = rsqrtf(ss / COLS + EPS);
    if (live)
        for (int c = sub; c < COLS; c += LANES)
            y[(size_t)row * COLS + c] = xr[c] * r * w[c];
}
