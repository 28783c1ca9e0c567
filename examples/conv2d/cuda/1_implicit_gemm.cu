// Step 1, implicit GEMM: the convolution as a GEMM y[m][k] = sum_g A[m][g] * B[g][k] with M = N*P*Q output pixels,
// K filters and g = (r, s, c) over R*S*C, without building A: A[m][g] is x at (n, p*STRIDE - PAD + r*DIL,
// q*STRIDE - PAD + s*DIL, c), or 0 in the padding (the im2col index map, done on the fly); B[g][k] = w[k][g] as
// KRSC is K rows of R*S*C. A 16 x 16 block covers 16 pixels x 16 filters; each thread owns one (m, k), works out its
// pixel's (n, p, q) once, and walks g tap by tap: the padding test is once per (r, s), not per product. No shared
// memory yet: neighbours in k share x's reads through L1. Any sizes.
// peak: entry=conv2d_igemm grid=(cdiv(N * P * Q, 16), cdiv(K, 16), 1) block=(16, 16, 1) shared=0
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef float T;  // the session's dtype: float, __half or __nv_bfloat16 (the only line to change)

extern "C" __global__ void conv2d_igemm(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                        int N, int H, int W, int C, int K, int R, int S, int STRIDE, int PAD,
                                        int DIL, int P, int Q)
{
    const long long m = (long long)blockIdx.x * 16 + threadIdx.y;
    const int k = blockIdx.y * 16 + threadIdx.x;
    if (m >= (long long)N * P * Q || k >= K) return;
    const int q = (int)(m % Q), p = (int)((m / Q) % P), n = (int)(m / ((long long)P * Q));
    const int h0 = p * STRIDE - PAD, v0 = q * STRIDE - PAD;
    const T* wk = w + (long long)k * R * S * C;
    float acc = 0.0f;
    for (int r = 0; r < R; ++r) {
        const int h = h0 + r * DIL;
        for (int s = 0; s < S; ++s) {
            const int v = v0 + s * DIL;
            if (h < 0 || h >= H || v < 0 || v >= W) continue;  // A's row is 0 over this tap
            const T* a = x + (((long long)n * H + h) * W + v) * C;
            const T* b = wk + (r * S + s) * C;
            for (int c = 0; c < C; ++c)
                acc = fmaf(static_cast<float>(a[c]), static_cast<float>(b[c]), acc);
        }
    }
    y[m * K + k] = T(acc);
}
