// Step 5, mma.sync from swizzled shared memory (f16 and bf16 sessions only): step 4's implicit GEMM (rows: output
// pixels, columns: filters, reduction g = (r*S + s)*C + c) with the tensor cores driven through PTX instead of wmma.
//  - Slices of BK = 64 (128-byte shared rows of 8 16-byte chunks), chunk j of row r stored at chunk j ^ (r & 7): the
//    8 rows an ldmatrix phase reads, and the 8 chunks a cp.async phase writes, fall in distinct banks, with no padding.
//  - A block of BM threads, (BM/64) x 2 warps, each a 64 x 32 tile of y: per k16 step 4 ldmatrix.x4 (A) and 2 (B) feed
//    16 mma.sync.m16n8k16 with f32 accumulators; the next step's fragments are loaded before this step's mma.
//  - Copies: 8 consecutive threads copy one 128-byte row (whole lines per warp); a thread's chunk column is the same in
//    every row it copies, so its tap (r, s, c) is advanced once per slice, with no division, and shared by its 8 A rows
//    and its B rows; each A row then costs one padding test (two unsigned compares) and a zero-filling cp.async. The
//    same gather serves 1x1 and 3x3 layers and any C % 8 == 0; other C takes guarded element loads into the same
//    pipeline. STAGES slices deep, one barrier per slice.
//  - Epilogue straight from the accumulators: packed pairs (half2 / bfloat162), no shared round trip.
// Any sizes: the tile edges are zero-filled, and an odd K or a huge tensor takes the guarded paths.
// H100, f16: 42.8 us on the ResNet-50 3x3 layer (wmma step 4: 68.5 us), about 41 us on the 1x1 layer (NVRTC: 168
// registers at BM=128, 3 blocks an SM).
// peak: entry=conv2d_mma grid=(cdiv(N * P * Q, BM), cdiv(K, 64), 1) block=(BM, 1, 1) shared=STAGES*(BM+64)*128
// peak: params BM=[128, 256] STAGES=[3, 4, 2]
// peak: where=STAGES * (BM + 64) * 128 <= 232448
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef float T;  // the session's dtype: __half or __nv_bfloat16 (the only line to change; float stops at the static_assert)
static_assert(sizeof(T) == 2, "tensor-core step: f16 and bf16 sessions only");
#ifndef BM
#define BM 128
#endif
#ifndef STAGES
#define STAGES 3
#endif
#define BN 64
#define BK 64                          // one shared row: 64 elements, 128 bytes
#define ROWS (BM / 8)                  // rows one copy pass of the block covers (8 threads a row)
#define A_PER (BM / ROWS)              // A rows a thread copies per slice (8)
#define B_PER (BN / ROWS)              // B rows a thread copies per slice
#define A_BYTES (BM * BK * 2)
#define STAGE_BYTES ((BM + BN) * BK * 2)
static_assert(BM % 128 == 0 && BN % ROWS == 0, "BM: 128 or 256 (64 spills)");

enum { SCALAR = 0, CHUNK = 1 };

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, bool whole)
{
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(whole ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N_> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N_) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
// d += a * b for one m16n8k16 tile; the pointer argument only picks the input type.
__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], const unsigned* b, const __half*)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], const unsigned* b,
                                         const __nv_bfloat16*)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ unsigned pack2(float lo, float hi, const __half*)
{
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&v);
}
__device__ __forceinline__ unsigned pack2(float lo, float hi, const __nv_bfloat16*)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&v);
}

template <int MODE>
__device__ __forceinline__ void conv_tile(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                          unsigned char* smem, int N, int H, int W, int C, int K, int R, int S,
                                          int STRIDE, int PAD, int DIL, int P, int Q)
{
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const long long M = (long long)N * P * Q;
    const int G = R * S * C;
    const long long m0 = (long long)blockIdx.x * BM;
    const int k0 = blockIdx.y * BN;
    const unsigned smem0 = (unsigned)__cvta_generic_to_shared(smem);

    // Copies: thread tid takes chunk column j of rows tid/8 + i*ROWS; every such row is tid/8 mod 8, so the chunk's
    // swizzled place in the row is the same for all of them.
    const int j = tid % 8, row0 = tid / 8;
    const unsigned cp_off = row0 * 128 + ((j ^ (row0 % 8)) << 4);
    // Per A row: the pixel of tap (0, 0) (CHUNK) or the image (SCALAR), and the window's origin. The rows are ROWS
    // apart: divide once for the first, then step (q, p, n) by ROWS (64-bit divisions per row would cost more
    // instructions than a 1x1 tile's whole multiply).
    int base[A_PER], h0[A_PER], w0[A_PER];
    int q, p, n;
    {
        const long long m = m0 + row0, t = m / Q;
        q = (int)(m - t * Q);
        const long long u = t / P;
        p = (int)(t - u * P);
        n = (int)(u < N ? u : N);  // n == N: past the last pixel
    }
#pragma unroll
    for (int i = 0; i < A_PER; ++i) {
        if (n < N) {
            h0[i] = p * STRIDE - PAD;
            w0[i] = q * STRIDE - PAD;
            base[i] = MODE == CHUNK ? (n * H + h0[i]) * W + w0[i] : n;
        } else {
            h0[i] = -(1 << 30);  // fails every padding test: the row is zero-filled
            w0[i] = 0;
            base[i] = 0;
        }
        q += ROWS;
        while (q >= Q && n < N) {
            q -= Q;
            if (++p == P) { p = 0; ++n; }
        }
    }
    // The tap of the thread's chunk for the next slice to copy: g = gl = (lr*S + ls)*C + lc.
    int gl = 8 * j, lc = 8 * j, lr = 0, ls = 0;
    if (MODE == CHUNK)
        while (lc >= C) {
            lc -= C;
            if (++ls == S) { ls = 0; ++lr; }
        }

    auto load = [&](int stage) {
        const unsigned sa = smem0 + stage * STAGE_BYTES, sb = sa + A_BYTES;
        if (MODE == CHUNK) {
            const bool tap_ok = lr < R;
            const int dh = lr * DIL, dw = ls * DIL, tap = dh * W + dw;
#pragma unroll
            for (int i = 0; i < A_PER; ++i) {
                const bool ok = tap_ok && (unsigned)(h0[i] + dh) < (unsigned)H && (unsigned)(w0[i] + dw) < (unsigned)W;
                const T* src = ok ? x + (long long)(base[i] + tap) * C + lc : x;
                cp_async16(sa + cp_off + i * ROWS * 128, src, ok);
            }
#pragma unroll
            for (int i = 0; i < B_PER; ++i) {
                const int k = k0 + row0 + i * ROWS;
                const bool ok = tap_ok && k < K;
                cp_async16(sb + cp_off + i * ROWS * 128, ok ? w + (long long)k * G + gl : w, ok);
            }
            gl += BK;
            lc += BK;
            while (lc >= C) {
                lc -= C;
                if (++ls == S) { ls = 0; ++lr; }
            }
        } else {  // element by element, each with its own tap; synchronous stores into the same swizzled rows
            unsigned char* a = smem + stage * STAGE_BYTES + cp_off;
#pragma unroll
            for (int i = 0; i < A_PER; ++i)
                for (int e = 0; e < 8; ++e) {
                    const int g = gl + e;
                    T v = T(0.0f);
                    if (g < G) {
                        const int c = g % C, rs = g / C, s = rs % S, r = rs / S;
                        const int h = h0[i] + r * DIL, v_ = w0[i] + s * DIL;
                        if (h >= 0 && h < H && v_ >= 0 && v_ < W) v = x[(((long long)base[i] * H + h) * W + v_) * C + c];
                    }
                    reinterpret_cast<T*>(a + i * ROWS * 128)[e] = v;
                }
#pragma unroll
            for (int i = 0; i < B_PER; ++i) {
                const int k = k0 + row0 + i * ROWS;
                for (int e = 0; e < 8; ++e) {
                    const int g = gl + e;
                    reinterpret_cast<T*>(a + A_BYTES + i * ROWS * 128)[e] =
                        (k < K && g < G) ? w[(long long)k * G + g] : T(0.0f);
                }
            }
            gl += BK;
        }
    };

    // Fragments: lane l addresses A row (l % 16), chunk 2*kk + l / 16 of its m16 tile, and B row (filter)
    // (l % 8) + 8 * (l / 16), chunk 2*kk + (l / 8) % 2 of its n16 pair; both rows are l mod 8, hence one XOR term.
    const int wm = (warp / 2) * 64, wn = (warp % 2) * 32, sw = lane % 8;
    const unsigned a_row = (wm + lane % 16) * 128, b_row = A_BYTES + (wn + lane % 8 + 8 * (lane / 16)) * 128;
    const int a_ch = lane / 16, b_ch = (lane / 8) % 2;
    float acc[4][4][4];
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0f;

    const int tiles = (G + BK - 1) / BK;
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {
        if (st < tiles) load(st);
        cp_async_commit();
    }
    for (int t = 0; t < tiles; ++t) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();  // slice t landed for every thread; every warp is done with slice t-1's stage
        if (t + STAGES - 1 < tiles) load((t + STAGES - 1) % STAGES);
        cp_async_commit();  // also when empty: the group count stays in step
        const unsigned s0 = smem0 + (t % STAGES) * STAGE_BYTES;
        unsigned af[2][4][4], bf[2][2][4];
        auto frags = [&](int buf, int kk) {
#pragma unroll
            for (int mi = 0; mi < 4; ++mi)
                ldmatrix_x4(af[buf][mi], s0 + a_row + mi * 16 * 128 + (((2 * kk + a_ch) ^ sw) << 4));
#pragma unroll
            for (int nj = 0; nj < 2; ++nj)
                ldmatrix_x4(bf[buf][nj], s0 + b_row + nj * 16 * 128 + (((2 * kk + b_ch) ^ sw) << 4));
        };
        frags(0, 0);
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            if (kk + 1 < BK / 16) frags((kk + 1) % 2, kk + 1);
#pragma unroll
            for (int mi = 0; mi < 4; ++mi)
#pragma unroll
                for (int ni = 0; ni < 4; ++ni)
                    mma16816(acc[mi][ni], af[kk % 2][mi], &bf[kk % 2][ni / 2][(ni % 2) * 2], (const T*)0);
        }
    }
    cp_async_wait<0>();

    // Accumulator (mi, ni): rows wm + 16 mi + lane/4 (+8), filters wn + 8 ni + 2 (lane % 4) and the next one.
    const bool pairs = K % 2 == 0;  // then a pair's address is 4-byte aligned
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const long long m = m0 + wm + mi * 16 + lane / 4 + half * 8;
            if (m >= M) continue;
            T* yrow = y + m * K;
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) {
                const int k = k0 + wn + ni * 8 + 2 * (lane % 4);
                const float lo = acc[mi][ni][2 * half], hi = acc[mi][ni][2 * half + 1];
                if (pairs && k + 1 < K) {
                    *reinterpret_cast<unsigned*>(yrow + k) = pack2(lo, hi, (const T*)0);
                } else {
                    if (k < K) yrow[k] = T(lo);
                    if (k + 1 < K) yrow[k + 1] = T(hi);
                }
            }
        }
}

// 3 blocks of 128 threads an SM (their 3 x 72 KiB of stages fit): at most 168 registers a thread.
extern "C" __global__ void __launch_bounds__(BM, 384 / BM) conv2d_mma(
    const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int N, int H, int W, int C, int K, int R,
    int S, int STRIDE, int PAD, int DIL, int P, int Q)
{
    extern __shared__ __align__(128) unsigned char smem[];
    // The chunk gather needs 16-byte rows of x and w (C % 8 == 0) and pixel indices (padding included) in an int.
    if (C % 8 == 0 && ((long long)N * H + PAD + 1) * W + PAD < (1LL << 31))
        conv_tile<CHUNK>(x, w, y, smem, N, H, W, C, K, R, S, STRIDE, PAD, DIL, P, Q);
    else
        conv_tile<SCALAR>(x, w, y, smem, N, H, W, C, K, R, S, STRIDE, PAD, DIL, P, Q);
}
