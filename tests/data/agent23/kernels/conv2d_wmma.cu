// dtype f16: T is the storage type, to_f32 reads an element, from_f32 rounds a float to T
#include <cuda_fp16.h>
#include <mma.h>
typedef __half T;
__device__ __forceinline__ float to_f32(T v) { return __half2float(v); }
__device__ __forceinline__ T from_f32(float v) { return __float2half_rn(v); }
// conv-tensor-cores on the implicit GEMM: a 128 (pixels) x 64 (filters) tile per block of 8 warps (4 x 2, each
// 32 x 32 = 2 x 2 wmma 16x16x16 f32 accumulators), slices of BK = 32 taps gathered element by element (guarded:
// 0 in the padding and past G), staged row-major with 40-element rows; the epilogue goes through shared memory.
// peak: entry=conv2d grid=(cdiv(K, 64), cdiv(N * ((H + 2 * PAD - DIL * (R - 1) - 1) // STRIDE + 1) * ((W + 2 * PAD - DIL * (S - 1) - 1) // STRIDE + 1), 128), 1) block=(256, 1, 1) shared=0
using namespace nvcuda;
#define BM 128
#define BN 64
#define BK 32
#define LD 40  // 80-byte rows: a 32-byte multiple for wmma's pointers, padded against bank conflicts

extern "C" __global__ void __launch_bounds__(256) conv2d(const T* x, const T* w, T* y, int N, int H, int W, int C,
        int K, int R, int S, int STRIDE, int PAD, int DIL, int P, int Q)
{
    // The slices (2 x 10 KB), reused by the epilogue for the f32 tile (128 x 68 floats, 34 KB).
    __shared__ __align__(32) unsigned char smem[BM * (BN + 4) * 4];
    T* As = reinterpret_cast<T*>(smem);       // [BM][LD]
    T* Bs = As + BM * LD;                     // [BN][LD]
    float* Cs = reinterpret_cast<float*>(smem);  // [BM][BN + 4], after the last multiply

    const long long M = (long long)N * P * Q;
    const int G = R * S * C;
    const long long m0 = (long long)blockIdx.y * BM;
    const int k0 = blockIdx.x * BN, t = threadIdx.x, warp = t / 32;
    const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;

    // Loader: thread t gathers half a pixel row of A (row t/2, taps (t%2)*16 .. +15) and a quarter of a filter
    // row of B (row t/4, taps (t%4)*8 .. +7).
    const long long am = m0 + t / 2;
    const int ag = (t % 2) * 16, bn = t / 4, bg = (t % 4) * 8;
    const bool apix = am < M, bfil = k0 + bn < K;
    int an = 0, ah0 = 0, av0 = 0;
    if (apix) {
        int q = (int)(am % Q); long long pq = am / Q;
        ah0 = (int)(pq % P) * STRIDE - PAD; av0 = q * STRIDE - PAD; an = (int)(pq / P);
    }
    const T* frow = w + (long long)(k0 + bn) * G;
    T ra[16], rb[8];
    auto gather = [&](int g0) {
        for (int i = 0; i < 16; ++i) {
            int g = g0 + ag + i;
            float v = 0.0f;
            if (apix && g < G) {
                int c = g % C, rs = g / C, s = rs % S, r = rs / S;
                int h = ah0 + r * DIL, vv = av0 + s * DIL;
                if (h >= 0 && h < H && vv >= 0 && vv < W) v = to_f32(x[(((long long)an * H + h) * W + vv) * C + c]);
            }
            ra[i] = from_f32(v);
        }
        for (int j = 0; j < 8; ++j) {
            int g = g0 + bg + j;
            rb[j] = (bfil && g < G) ? frow[g] : from_f32(0.0f);
        }
    };

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
    for (int i = 0; i < 2; ++i) for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    gather(0);
    for (int g0 = 0; g0 < G; g0 += BK) {
        for (int i = 0; i < 16; ++i) As[(t / 2) * LD + ag + i] = ra[i];
        for (int j = 0; j < 8; ++j) Bs[bn * LD + bg + j] = rb[j];
        __syncthreads();
        if (g0 + BK < G) gather(g0 + BK);  // the next slice's global latency overlaps the multiply
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b[2];
            for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], As + (wm + i * 16) * LD + kk, LD);
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], Bs + (wn + j * 16) * LD + kk, LD);
            for (int i = 0; i < 2; ++i) for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    // Epilogue: the f32 tile through shared memory (the last barrier above freed the slices), then coalesced rows.
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j)
            wmma::store_matrix_sync(Cs + (wm + i * 16) * (BN + 4) + wn + j * 16, acc[i][j], BN + 4, wmma::mem_row_major);
    __syncthreads();
    for (int e = t; e < BM * BN; e += 256) {
        int row = e / BN, col = e % BN;
        long long m = m0 + row;
        if (m < M && k0 + col < K) y[m * K + k0 + col] = from_f32(Cs[row * (BN + 4) + col]);
    }
}
