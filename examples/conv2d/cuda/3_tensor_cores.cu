// Step 3, tensor cores on the GEMM view (f16 and bf16 sessions only: wmma has no f32 type, and TF32 would lose
// 13 bits of an f32 session's precision): step 2's 128 x 64 tile of y, now stepping g = (r, s, c) 32 at a time and
// multiplied by 8 warps as 4 (pixels) x 2 (filters), each a 32 x 32 warp tile of four 16 x 16 x 16 wmma products
// accumulating in f32. A slice is 128 x 32 of the im2col matrix in shared memory (row-major, rows padded to 40
// elements), B's is 64 filters x 32 of w (w rows are B's columns: col_major for wmma, same padding). Where C % 8 == 0
// (decided once per launch) each thread gathers 16-byte chunks of 8 channels, one padding test per chunk, and
// fetches the next slice into registers while the warps multiply this one; otherwise guarded element loads. The f32
// accumulators go through shared memory to be written as coalesced rows of y. Any sizes.
// peak: entry=conv2d_wmma grid=(cdiv(N * P * Q, 128), cdiv(K, 64), 1) block=(256, 1, 1) shared=0
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>
using namespace nvcuda;

typedef float T;  // the session's dtype: __half or __nv_bfloat16 (the only line to change; float stops at the static_assert)
static_assert(sizeof(T) == 2, "tensor-core step: f16 and bf16 sessions only");
#define BM 128
#define BN 64
#define BK 32
#define LDS (BK + 8)   // shared row stride in elements (80 bytes)
#define LDC (BN + 4)   // f32 epilogue row stride

extern "C" __global__ void __launch_bounds__(256) conv2d_wmma(
    const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int N, int H, int W, int C, int K, int R,
    int S, int STRIDE, int PAD, int DIL, int P, int Q)
{
    __shared__ __align__(128) unsigned char smem[BM * LDC * 4];  // A and B slices; then the f32 tile of y
    T* As = reinterpret_cast<T*>(smem);
    T* Bs = As + BM * LDS;
    float* Cs = reinterpret_cast<float*>(smem);
    const int tid = threadIdx.x, warp = tid / 32;
    const long long M = (long long)N * P * Q;
    const int G = R * S * C;
    const long long m0 = (long long)blockIdx.x * BM;
    const int k0 = blockIdx.y * BN;
    const bool vec = C % 8 == 0;

    // A loader: pixel row tid / 2, g offsets (tid % 2) * 16 .. + 15 (two chunks of 8).
    const int a_row = tid >> 1, a_g = (tid & 1) * 16;
    const long long am = m0 + a_row;
    const bool a_ok = am < M;
    int an = 0, ah0 = 0, av0 = 0;
    if (a_ok) {
        const int q = (int)(am % Q), p = (int)((am / Q) % P);
        an = (int)(am / ((long long)P * Q));
        ah0 = p * STRIDE - PAD;
        av0 = q * STRIDE - PAD;
    }
    // B loader: filter row tid / 4, g offsets (tid % 4) * 8 .. + 7 (one chunk).
    const int b_row = tid >> 2, b_g = (tid & 3) * 8;
    const bool b_ok = k0 + b_row < K;
    const T* wrow = w + (long long)(k0 + b_row) * G;

    auto a_offset = [&](int g) -> long long {  // x's element for A[am][g], or -1 in the padding
        const int c = g % C, rs = g / C, s = rs % S, r = rs / S;
        const int h = ah0 + r * DIL, v = av0 + s * DIL;
        return (h >= 0 && h < H && v >= 0 && v < W) ? (((long long)an * H + h) * W + v) * C + c : -1;
    };
    uint4 a_next[2], b_next;
    auto fetch = [&](int g0) {  // vector path: 16-byte chunks, whole or zero (C % 8 == 0 keeps a chunk in one tap)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int g = g0 + a_g + i * 8;
            const long long o = (a_ok && g < G) ? a_offset(g) : -1;
            a_next[i] = o >= 0 ? *reinterpret_cast<const uint4*>(x + o) : make_uint4(0, 0, 0, 0);
        }
        const int g = g0 + b_g;
        b_next = (b_ok && g < G) ? *reinterpret_cast<const uint4*>(wrow + g) : make_uint4(0, 0, 0, 0);
    };

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
    const int wm = (warp % 4) * 32, wn = (warp / 4) * 32;

    if (vec) fetch(0);
    for (int g0 = 0; g0 < G; g0 += BK) {
        if (vec) {
            *reinterpret_cast<uint4*>(As + a_row * LDS + a_g) = a_next[0];
            *reinterpret_cast<uint4*>(As + a_row * LDS + a_g + 8) = a_next[1];
            *reinterpret_cast<uint4*>(Bs + b_row * LDS + b_g) = b_next;
        } else {
#pragma unroll 4
            for (int i = 0; i < 16; ++i) {
                const int g = g0 + a_g + i;
                const long long o = (a_ok && g < G) ? a_offset(g) : -1;
                As[a_row * LDS + a_g + i] = o >= 0 ? x[o] : T(0.0f);
            }
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const int g = g0 + b_g + i;
                Bs[b_row * LDS + b_g + i] = (b_ok && g < G) ? wrow[g] : T(0.0f);
            }
        }
        __syncthreads();
        if (vec && g0 + BK < G) fetch(g0 + BK);
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], As + (wm + i * 16) * LDS + kk, LDS);
#pragma unroll
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], Bs + (wn + j * 16) * LDS + kk, LDS);
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
            wmma::store_matrix_sync(Cs + (wm + i * 16) * LDC + wn + j * 16, acc[i][j], LDC, wmma::mem_row_major);
    __syncthreads();
    const int col = tid % BN;
    if (k0 + col < K) {
        for (int row = tid / BN; row < BM; row += 256 / BN) {
            const long long m = m0 + row;
            if (m >= M) break;
            y[m * K + k0 + col] = T(Cs[row * LDC + col]);
        }
    }
}
