// Tensor cores through WMMA (f16 inputs, f32 accumulation and output): nvcuda::wmma 16x16x16 fragments replace
// the FMA micro-kernel. Block tile 128x128, K steps of 32; 8 warps as 2 (M) x 4 (N), each owning a 64x32 warp tile
// = 4x2 f32 accumulator fragments. Each K step loads the A (128x32) and B (32x128) tiles into shared memory as f16,
// one barrier, 2 k16 sub-steps of fragment loads and 8 mma_sync per warp, one barrier. Shared rows are padded by 8
// elements (strides of 80 and 272 bytes, odd multiples of 16 B): load_matrix_sync is free of bank conflicts and
// fragment pointers stay 32-byte aligned.
// Any M, N, K >= 1. Fast path when K % 8 == 0 and N % 8 == 0 (decided once per launch, a uniform branch): 16-byte
// global loads, each chunk wholly inside its matrix or zero-filled. Otherwise guarded scalar loads. Fragments wholly
// inside C are stored to C directly on the fast path; edge fragments go through a per-warp shared scratch and guarded
// scalar stores. __launch_bounds__(256, 2): at most 128 registers, two blocks (16 warps) per SM.
// peak: entry=matmul_wmma grid=(cdiv(N, 128), cdiv(M, 128), 1) block=(256, 1, 1) shared=0
#include <cuda_fp16.h>
#include <mma.h>
using namespace nvcuda;

typedef __half T;
#define BM 128
#define BN 128
#define BK 32
#define PAD 8

// Elements col..col+7 of row `row` of a rows x cols row-major matrix, zero outside it, one element at a time.
__device__ __forceinline__ uint4 load8_scalar(const T* base, int row, int col, int rows, int cols)
{
    const unsigned short* p = reinterpret_cast<const unsigned short*>(base);
    unsigned h[8];
#pragma unroll
    for (int e = 0; e < 8; ++e)
        h[e] = (row < rows && col + e < cols) ? p[(size_t)row * cols + col + e] : 0u;
    return make_uint4(h[0] | (h[1] << 16), h[2] | (h[3] << 16), h[4] | (h[5] << 16), h[6] | (h[7] << 16));
}

extern "C" __global__ void __launch_bounds__(256, 2) matmul_wmma(const T* A, const T* B, float* C, int M, int N, int K)
{
    __shared__ __align__(32) T As[BM][BK + PAD];
    __shared__ __align__(32) T Bs[BK][BN + PAD];
    __shared__ __align__(32) float Cs[8][16 * 16];  // per-warp scratch for edge fragments
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp / 4, wn = warp % 4;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const bool vec = (K % 8) == 0 && (N % 8) == 0;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
            wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < K; k0 += BK) {
        // 512 16-byte chunks per tile, 2 per thread: A rows c / 4, B rows c / 16.
        if (vec) {  // every chunk is 16-byte aligned and wholly inside or wholly outside its matrix
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int c = tid + r * 256;
                const int ar = c / 4, ac = (c % 4) * 8, br = c / 16, bc = (c % 16) * 8;
                const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
                const bool aIn = m0 + ar < M && k0 + ac < K, bIn = k0 + br < K && n0 + bc < N;
                *reinterpret_cast<uint4*>(&As[ar][ac]) =
                    aIn ? *reinterpret_cast<const uint4*>(A + (size_t)(m0 + ar) * K + k0 + ac) : zero;
                *reinterpret_cast<uint4*>(&Bs[br][bc]) =
                    bIn ? *reinterpret_cast<const uint4*>(B + (size_t)(k0 + br) * N + n0 + bc) : zero;
            }
        } else {
#pragma unroll 1
            for (int r = 0; r < 2; ++r) {
                const int c = tid + r * 256;
                const int ar = c / 4, ac = (c % 4) * 8, br = c / 16, bc = (c % 16) * 8;
                *reinterpret_cast<uint4*>(&As[ar][ac]) = load8_scalar(A, m0 + ar, k0 + ac, M, K);
                *reinterpret_cast<uint4*>(&Bs[br][bc]) = load8_scalar(B, k0 + br, n0 + bc, K, N);
            }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            // Both B fragments, then one A fragment at a time: fewer live registers than holding all four.
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb[2];
#pragma unroll
            for (int j = 0; j < 2; ++j)
                wmma::load_matrix_sync(fb[j], &Bs[kk][wn * 32 + j * 16], BN + PAD);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
                wmma::load_matrix_sync(fa, &As[wm * 64 + i * 16][kk], BK + PAD);
#pragma unroll
                for (int j = 0; j < 2; ++j)
                    wmma::mma_sync(acc[i][j], fa, fb[j], acc[i][j]);
            }
        }
        __syncthreads();  // the next iteration overwrites the tiles
    }

    // The fragment's element-to-lane mapping is unspecified, so fragments leave through store_matrix_sync. The
    // branch depends only on the warp's position: warp-uniform, as the collective store requires.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int row0 = m0 + wm * 64 + i * 16, col0 = n0 + wn * 32 + j * 16;
            if (vec && row0 + 16 <= M && col0 + 16 <= N) {
                // N % 8 == 0 and col0 % 16 == 0: the pointer is 32-byte aligned and ldm a multiple of 4.
                wmma::store_matrix_sync(C + (size_t)row0 * N + col0, acc[i][j], N, wmma::mem_row_major);
            } else {
                wmma::store_matrix_sync(Cs[warp], acc[i][j], 16, wmma::mem_row_major);
                __syncwarp();
                const int r = lane / 2, c = (lane % 2) * 8;
#pragma unroll
                for (int e = 0; e < 8; ++e)
                    if (row0 + r < M && col0 + c + e < N)
                        C[(size_t)(row0 + r) * N + col0 + c + e] = Cs[warp][r * 16 + c + e];
                __syncwarp();  // the scratch is reused by the next fragment
            }
        }
    }
}
