// HOSTILE oob_read_padding: the naive convolution without the padding test: a tap above, left of, right of or below the image reads whatever lies there (the previous row, the previous image, or before x itself).
// EXPECT: status=failed failure=out_of_bounds_read|wrong_result.
typedef float T;
// peak: entry=conv2d grid=(cdiv(N * ((H + 2 * PAD - DIL * (R - 1) - 1) // STRIDE + 1) * ((W + 2 * PAD - DIL * (S - 1) - 1) // STRIDE + 1) * K, 256), 1, 1) block=(256, 1, 1) shared=0
extern "C" __global__ void conv2d(const T* x, const T* w, T* y, int N, int H, int W, int C, int K, int R, int S,
                                  int STRIDE, int PAD, int DIL, int P, int Q)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)N * P * Q * K) return;
    int k = (int)(i % K);
    long long pix = i / K;
    int q = (int)(pix % Q);
    int p = (int)((pix / Q) % P);
    int n = (int)(pix / ((long long)P * Q));
    float acc = 0.0f;
    for (int r = 0; r < R; ++r) {
        int h = p * STRIDE - PAD + r * DIL;
        // BUG: no test that the row is inside the image
        for (int s = 0; s < S; ++s) {
            int v = q * STRIDE - PAD + s * DIL;
            // BUG: nor the column
            const T* in = x + (((long long)n * H + h) * W + v) * C;
            const T* f = w + (((long long)k * R + r) * S + s) * C;
            for (int c = 0; c < C; ++c)
                acc += in[c] * f[c];
        }
    }
    y[i] = acc;
}
