// Row sum, one warp per row: strided partial sums reduced by shuffles.
// peak: entry=row_sum_warp grid=(cdiv(ROWS, 4), 1, 1) block=(128, 1, 1) shared=0
extern "C" __global__ void row_sum_warp(const T* x, float* y, int ROWS, int COLS)
{
    int row = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= ROWS) return;
    const T* in = x + (long long)row * COLS;
    float sum = 0.0f;
    for (int c = lane; c < COLS; c += 32) sum += to_f32(in[c]);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) y[row] = sum;
}
