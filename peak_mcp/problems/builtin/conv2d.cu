// Naive convolution: one thread per output element y[n, p, q, k] (k fastest), summing C*R*S products in f32;
// taps outside the input (the padding) are skipped, as they read 0.
// peak: entry=conv2d grid=(cdiv(N * P * Q * K, 256), 1, 1) block=(256, 1, 1) shared=0
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
        if (h < 0 || h >= H) continue;
        for (int s = 0; s < S; ++s) {
            int v = q * STRIDE - PAD + s * DIL;
            if (v < 0 || v >= W) continue;
            const T* in = x + (((long long)n * H + h) * W + v) * C;
            const T* f = w + (((long long)k * R + r) * S + s) * C;
            for (int c = 0; c < C; ++c)
                acc += to_f32(in[c]) * to_f32(f[c]);
        }
    }
    y[i] = from_f32(acc);
}
