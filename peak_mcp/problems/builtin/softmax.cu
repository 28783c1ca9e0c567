// Naive row softmax: one thread per row, three passes over the row (max, sum of exp, normalized write).
// peak: entry=softmax grid=(cdiv(ROWS, 128), 1, 1) block=(128, 1, 1) shared=0
extern "C" __global__ void softmax(const T* x, T* y, int ROWS, int COLS)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= ROWS) return;
    const T* in = x + (long long)row * COLS;
    T* out = y + (long long)row * COLS;
    float m = -3.402823466e38f;
    for (int c = 0; c < COLS; ++c)
        m = fmaxf(m, to_f32(in[c]));
    float sum = 0.0f;
    for (int c = 0; c < COLS; ++c)
        sum += expf(to_f32(in[c]) - m);
    for (int c = 0; c < COLS; ++c)
        out[c] = from_f32(expf(to_f32(in[c]) - m) / sum);
}
