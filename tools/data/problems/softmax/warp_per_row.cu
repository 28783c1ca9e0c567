// Row softmax, one warp per row: shuffles reduce the max and the sum; fast-math exp and division (__expf, __fdividef).
// peak: entry=softmax_warp grid=(cdiv(ROWS, 4), 1, 1) block=(128, 1, 1) shared=0
extern "C" __global__ void softmax_warp(const T* x, T* y, int ROWS, int COLS)
{
    int row = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= ROWS) return;
    const T* in = x + (long long)row * COLS;
    T* out = y + (long long)row * COLS;
    float m = -3.402823466e38f;
    for (int c = lane; c < COLS; c += 32) m = fmaxf(m, to_f32(in[c]));
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float sum = 0.0f;
    for (int c = lane; c < COLS; c += 32) sum += __expf(to_f32(in[c]) - m);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    for (int c = lane; c < COLS; c += 32) out[c] = from_f32(__fdividef(__expf(to_f32(in[c]) - m), sum));
}
