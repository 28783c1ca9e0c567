// dtype f16: T is the storage type, to_f32 reads an element, from_f32 rounds a float to T
#include <cuda_fp16.h>
typedef __half T;
__device__ __forceinline__ float to_f32(T v) { return __half2float(v); }
__device__ __forceinline__ T from_f32(float v) { return __float2half_rn(v); }
// conv-implicit-gemm: Y[m][k] = sum over g = (r, s, c) of A[m][g] B[g][k]; a 16 (filters, x) by 16 (pixels, y)
// block; (n, p, q) and the tap origin once per pixel, one padding test per tap.
// peak: entry=conv2d grid=(cdiv(K, 16), cdiv(N * ((H + 2 * PAD - DIL * (R - 1) - 1) // STRIDE + 1) * ((W + 2 * PAD - DIL * (S - 1) - 1) // STRIDE + 1), 16), 1) block=(16, 16, 1) shared=0
extern "C" __global__ void conv2d(const T* x, const T* w, T* y, int N, int H, int W, int C, int K, int R, int S,
                                  int STRIDE, int PAD, int DIL, int P, int Q)
{
    int k = blockIdx.x * 16 + threadIdx.x;
    long long m = (long long)blockIdx.y * 16 + threadIdx.y;
    if (k >= K || m >= (long long)N * P * Q) return;
    int q = (int)(m % Q);
    long long pq = m / Q;
    int p = (int)(pq % P), n = (int)(pq / P);
    int h0 = p * STRIDE - PAD, v0 = q * STRIDE - PAD;
    const T* f = w + (long long)k * R * S * C;  // B[g][k] = w[k*G + g]
    float acc = 0.0f;
    for (int r = 0; r < R; ++r) {
        int h = h0 + r * DIL;
        if (h < 0 || h >= H) continue;
        for (int s = 0; s < S; ++s) {
            int v = v0 + s * DIL;
            if (v < 0 || v >= W) continue;
            const T* in = x + (((long long)n * H + h) * W + v) * C;
            const T* fr = f + (r * S + s) * C;
            for (int c = 0; c < C; ++c) acc += to_f32(in[c]) * to_f32(fr[c]);
        }
    }
    y[m * K + k] = from_f32(acc);
}
