// HOSTILE relu_input_in_place: a convolution that "fuses" the previous layer's ReLU by clamping x in place as it
// reads it: its own output is right (every thread clamps before it reads), but the input buffer it was lent is
// changed, which breaks whoever reads x next.
// EXPECT: status=failed failure=input_modified.
typedef float T;
// peak: entry=conv2d grid=(cdiv(N * ((H + 2 * PAD - DIL * (R - 1) - 1) // STRIDE + 1) * ((W + 2 * PAD - DIL * (S - 1) - 1) // STRIDE + 1) * K, 256), 1, 1) block=(256, 1, 1) shared=0
extern "C" __global__ void conv2d(T* x, const T* w, T* y, int N, int H, int W, int C, int K, int R, int S,
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
        if (h < 0 || h >= H) continue;
        for (int s = 0; s < S; ++s) {
            int v = q * STRIDE - PAD + s * DIL;
            if (v < 0 || v >= W) continue;
            T* in = x + (((long long)n * H + h) * W + v) * C;
            const T* f = w + (((long long)k * R + r) * S + s) * C;
            for (int c = 0; c < C; ++c) {
                float a = fmaxf(in[c], 0.0f);
                in[c] = a;                               // BUG: writes the input
                acc += a * f[c];
            }
        }
    }
    y[i] = acc;
}
