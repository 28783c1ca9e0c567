// Step 2, the GEMM view tiled through shared memory: a block computes a 128 (pixels) x 64 (filters) tile of y,
// stepping g = (r, s, c) 16 at a time. Per step the 256 threads gather A's 128 x 16 slice (the im2col map on the
// fly: each thread 8 consecutive g of one pixel, zero where the tap falls in the padding) and B's 64 x 16 slice of
// w into shared memory, one barrier, then each thread multiplies an 8 x 4 register tile from it (8 + 4 shared reads
// for 32 FMAs). A is stored g-major (As[g][m]) so the compute loop reads 8 consecutive pixels as two float4s.
// The next slice is fetched into registers while this one is multiplied. Any sizes: every load is guarded.
// peak: entry=conv2d_smem grid=(cdiv(N * P * Q, 128), cdiv(K, 64), 1) block=(256, 1, 1) shared=0
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef float T;  // the session's dtype: float, __half or __nv_bfloat16 (the only line to change)
#define BM 128
#define BN 64
#define BK 16
#define TM 8
#define TN 4

extern "C" __global__ void __launch_bounds__(256) conv2d_smem(
    const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int N, int H, int W, int C, int K, int R,
    int S, int STRIDE, int PAD, int DIL, int P, int Q)
{
    __shared__ __align__(16) float As[BK][BM + 4];
    __shared__ __align__(16) float Bs[BK][BN + 4];
    const int tid = threadIdx.x;
    const long long M = (long long)N * P * Q;
    const int G = R * S * C;
    const long long m0 = (long long)blockIdx.x * BM;
    const int k0 = blockIdx.y * BN;

    // A loader: pixel row tid / 2 of the tile, g offsets (tid % 2) * 8 .. + 7 of each slice.
    const int a_row = tid >> 1, a_g = (tid & 1) * 8;
    const long long am = m0 + a_row;
    const bool a_ok = am < M;
    int an = 0, ah0 = 0, av0 = 0;
    if (a_ok) {
        const int q = (int)(am % Q), p = (int)((am / Q) % P);
        an = (int)(am / ((long long)P * Q));
        ah0 = p * STRIDE - PAD;
        av0 = q * STRIDE - PAD;
    }
    // B loader: filter row tid / 4 of the tile, g offsets (tid % 4) * 4 .. + 3.
    const int b_row = tid >> 2, b_g = (tid & 3) * 4;
    const bool b_ok = k0 + b_row < K;
    const T* wrow = w + (long long)(k0 + b_row) * G;

    float a_next[8], b_next[4];
    auto fetch = [&](int g0) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int g = g0 + a_g + i;
            float v = 0.0f;
            if (a_ok && g < G) {
                const int c = g % C, rs = g / C, s = rs % S, r = rs / S;
                const int h = ah0 + r * DIL, vv = av0 + s * DIL;
                if (h >= 0 && h < H && vv >= 0 && vv < W)
                    v = static_cast<float>(x[(((long long)an * H + h) * W + vv) * C + c]);
            }
            a_next[i] = v;
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int g = g0 + b_g + i;
            b_next[i] = (b_ok && g < G) ? static_cast<float>(wrow[g]) : 0.0f;
        }
    };

    const int ty = tid / 16, tx = tid % 16;  // the thread's 8 x 4 register tile: pixels ty*8.., filters tx*4..
    float acc[TM][TN] = {};
    fetch(0);
    for (int g0 = 0; g0 < G; g0 += BK) {
#pragma unroll
        for (int i = 0; i < 8; ++i) As[a_g + i][a_row] = a_next[i];
#pragma unroll
        for (int i = 0; i < 4; ++i) Bs[b_g + i][b_row] = b_next[i];
        __syncthreads();
        if (g0 + BK < G) fetch(g0 + BK);  // global loads in flight during the multiply below
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            const float4 a0 = *reinterpret_cast<const float4*>(&As[kk][ty * TM]);
            const float4 a1 = *reinterpret_cast<const float4*>(&As[kk][ty * TM + 4]);
            const float4 b = *reinterpret_cast<const float4*>(&Bs[kk][tx * TN]);
            const float a[TM] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float bb[TN] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], bb[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const long long m = m0 + ty * TM + i;
        if (m >= M) break;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int k = k0 + tx * TN + j;
            if (k < K) y[m * K + k] = T(acc[i][j]);
        }
    }
}
