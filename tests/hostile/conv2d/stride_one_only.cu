// HOSTILE stride_one_only: the naive convolution written for the common case, stride 1 and no dilation, with the
// STRIDE and DIL arguments read but not used: exact at every session here (3x3, stride 1), wrong wherever the
// generality check samples a stride of 2 or 3 or a dilation of 2.
// EXPECT: status=not_general failure=generality_*.
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
        int h = p - PAD + r;                             // BUG: p * STRIDE - PAD + r * DIL
        if (h < 0 || h >= H) continue;
        for (int s = 0; s < S; ++s) {
            int v = q - PAD + s;                         // BUG: likewise
            if (v < 0 || v >= W) continue;
            const T* in = x + (((long long)n * H + h) * W + v) * C;
            const T* f = w + (((long long)k * R + r) * S + s) * C;
            for (int c = 0; c < C; ++c)
                acc += in[c] * f[c];
        }
    }
    y[i] = acc;
}
