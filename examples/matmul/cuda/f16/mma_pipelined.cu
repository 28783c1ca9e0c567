// Tensor cores through inline PTX (f16 inputs, f32 accumulation and output): mma.sync m16n8k16 fed by ldmatrix, with
// a STAGES-deep cp.async pipeline (STAGES is a tuning parameter). Block tile 128x256, K steps of 32; 8 warps as
// 2 (M) x 4 (N), each owning a 64x64 warp tile = 4 m16 x 8 n8 tiles, 128 f32 accumulators per thread. Per k16 sub-step a warp issues 4 ldmatrix.x4 (A),
// 4 ldmatrix.x4.trans (B: row-major K x N tiles become the k-pairs mma wants) and 32 mma.
// Shared memory (dynamic, STAGES stages of A 128x(32+8) and B 32x(256+8) in the input type): the padded row strides of 80
// and 528 bytes are odd multiples of 16 B, so the 8 row addresses of every ldmatrix phase fall in distinct banks.
// Pipeline: tile t+STAGES-1 is copied with 16-byte cp.async.cg while tile t is multiplied, one commit group per tile (empty
// ones too, so wait_group counts stay in step). Fragments are double-buffered in registers: the ldmatrix for the next
// k16 sub-step (across the tile boundary too) is issued before the mma of the current one. One barrier per tile, at
// its last sub-step: after it tile t+1 may be read, and every warp has read all of tile t, whose stage the next
// iteration refills with tile t+STAGES. Copies past K are zero-filled rather than skipped: the loop body has no branch.
// Any M, N, K >= 1. Fast path when K % 8 == 0 and N % 8 == 0: every 16-byte chunk is aligned and either wholly inside
// its matrix or wholly outside, where the cp.async source size 0 zero-fills it. Otherwise (decided once per launch)
// the same pipeline runs with guarded scalar loads and 16-byte shared stores. Epilogue straight from the mma registers.
// peak: entry=matmul_mma grid=(cdiv(N, 256), cdiv(M, 128), 1) block=(256, 1, 1) shared=STAGES*27136
// peak: params STAGES=[4, 3, 5, 6]
#include <cuda_fp16.h>

typedef __half T;
#define BM 128
#define BN 256
#define BK 32
#define NT 8                                        // n8 tiles per warp (warp tile 64 x 64)
#define A_LD (BK + 8)                               // elements per A row in shared memory (80 bytes)
#define B_LD (BN + 8)                               // elements per B row in shared memory (528 bytes)
#define A_STAGE_BYTES (BM * A_LD * 2)               // 10240
#define B_STAGE_BYTES (BK * B_LD * 2)               // 16896
#define STAGE_BYTES (A_STAGE_BYTES + B_STAGE_BYTES) // 27136
static_assert(STAGE_BYTES == 27136, "keep shared= on the peak: line equal to STAGES stages of these bytes");

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void st_shared16(unsigned dst, uint4 v)
{
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}
__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], unsigned addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, unsigned addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
// Not volatile: a pure function of its registers, so the compiler may interleave it with loads and copies.
__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Slow path for rows that are not 16-byte aligned: elements col..col+7 of row `row`, zero outside the matrix.
__device__ __forceinline__ uint4 load8_scalar(const T* base, int row, int col, int rows, int cols)
{
    const unsigned short* p = reinterpret_cast<const unsigned short*>(base);
    unsigned h[8];
#pragma unroll
    for (int e = 0; e < 8; ++e)
        h[e] = (row < rows && col + e < cols) ? p[(size_t)row * cols + col + e] : 0u;
    return make_uint4(h[0] | (h[1] << 16), h[2] | (h[3] << 16), h[4] | (h[5] << 16), h[6] | (h[7] << 16));
}

template <bool VEC>
__device__ __forceinline__ void mainloop(float (&acc)[4][NT][4], const T* A, const T* B, int M, int N, int K,
                                         int m0, int n0, unsigned sbase)
{
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp / 4, wn = warp % 4;
    const int KT = (K + BK - 1) / BK;

    // Copy roles: the A tile (128x32) is 512 chunks of 8 elements, this thread's are rows aRow and aRow + 64 at
    // column aCol; the B tile (32x256) is 1024 chunks, rows bRow + 8r (r < 4) at column bCol.
    const int aRow = tid / 4, aCol = (tid % 4) * 8;
    const int bRow = tid / 32, bCol = (tid % 32) * 8;
    const unsigned aDst = (aRow * A_LD + aCol) * 2;
    const unsigned bDst = A_STAGE_BYTES + (bRow * B_LD + bCol) * 2;
    const bool bColIn = n0 + bCol < N;
    const size_t bStep = (size_t)8 * N;  // 8 rows of B

    auto issue = [&](int kt, int stage) {  // tiles kt >= KT come out all zeros: no row is < K
        const int k0 = kt * BK;
        const unsigned s = sbase + stage * STAGE_BYTES;
        if constexpr (VEC) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int row = m0 + aRow + 64 * r, col = k0 + aCol;
                const bool ok = row < M && col < K;  // source size 0 writes 16 zero bytes; A stays a valid address
                cp_async16(s + aDst + r * 64 * A_LD * 2, ok ? A + (size_t)row * K + col : A, ok ? 16 : 0);
            }
            const T* bSrc = B + (size_t)(k0 + bRow) * N + n0 + bCol;  // dereferenced only where ok
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const bool ok = k0 + bRow + 8 * r < K && bColIn;
                cp_async16(s + bDst + r * 8 * B_LD * 2, ok ? bSrc + r * bStep : B, ok ? 16 : 0);
            }
        } else {  // one chunk at a time: this path is there for correctness, not speed
#pragma unroll 1
            for (int r = 0; r < 2; ++r)
                st_shared16(s + aDst + r * 64 * A_LD * 2, load8_scalar(A, m0 + aRow + 64 * r, k0 + aCol, M, K));
#pragma unroll 1
            for (int r = 0; r < 4; ++r)
                st_shared16(s + bDst + r * 8 * B_LD * 2, load8_scalar(B, k0 + bRow + 8 * r, n0 + bCol, K, N));
        }
    };

    // ldmatrix roles (bytes from a stage's start). A, m16 tile i: lanes 0-15 address rows 0-15 at k 0-7, lanes 16-31
    // rows 0-15 at k 8-15, giving a0..a3 of the m16n8k16 A fragment. B, n8 tiles 2p and 2p+1 with .trans: lanes 0-15
    // address k rows 0-15 at n 0-7, lanes 16-31 the same rows at n 8-15, giving b0, b1 of tile 2p then of tile 2p+1.
    const unsigned aLd = ((wm * 64 + lane % 16) * A_LD + (lane / 16) * 8) * 2;
    const unsigned bLd = A_STAGE_BYTES + ((lane % 16) * B_LD + wn * 64 + (lane / 16) * 8) * 2;
    unsigned a[2][4][4], b[2][NT][2];
    auto load_frags = [&](int buf, int stage, int kk) {
        const unsigned s = sbase + stage * STAGE_BYTES;
#pragma unroll
        for (int i = 0; i < 4; ++i)
            ldsm_x4(a[buf][i], s + aLd + (i * 16 * A_LD + kk) * 2);
#pragma unroll
        for (int p = 0; p < NT / 2; ++p)
            ldsm_x4_t(b[buf][2 * p][0], b[buf][2 * p][1], b[buf][2 * p + 1][0], b[buf][2 * p + 1][1],
                      s + bLd + (kk * B_LD + p * 16) * 2);
    };

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        issue(s, s);
        cp_async_commit();
    }
    cp_async_wait<STAGES - 2>();  // tile 0 has landed
    __syncthreads();
    load_frags(0, 0, 0);
    int readStage = 0, writeStage = STAGES - 1;
    for (int kt = 0; kt < KT; ++kt) {
#pragma unroll
        for (int ks = 0; ks < BK / 16; ++ks) {
            if (ks == BK / 16 - 1) {
                cp_async_wait<STAGES - 2>();  // this thread's copies of tile kt+1 have landed
                __syncthreads();              // everyone's have, and every warp has read all of tile kt
                readStage = readStage == STAGES - 1 ? 0 : readStage + 1;
            }
            // Next sub-step's fragments: of this tile, or of tile kt+1 (after the last tile: a harmless read of
            // zeros, never used).
            load_frags((ks + 1) % 2, readStage, ((ks + 1) % (BK / 16)) * 16);
            if (ks == 0) {
                issue(kt + STAGES - 1, writeStage);  // refills the stage of tile kt-1
                cp_async_commit();
                writeStage = writeStage == STAGES - 1 ? 0 : writeStage + 1;
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j)
                    mma16816(acc[i][j], a[ks % 2][i], b[ks % 2][j]);
        }
    }
    cp_async_wait<0>();  // only zero-fill groups remain; drained before the block exits
}

extern "C" __global__ void __launch_bounds__(256, 1) matmul_mma(const T* A, const T* B, float* C, int M, int N, int K)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const unsigned sbase = (unsigned)__cvta_generic_to_shared(smem);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = warp / 4, wn = warp % 4;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    float acc[4][NT][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[i][j][e] = 0.0f;
    if ((K % 8) == 0 && (N % 8) == 0)
        mainloop<true>(acc, A, B, M, N, K, m0, n0, sbase);
    else
        mainloop<false>(acc, A, B, M, N, K, m0, n0, sbase);

    // C fragment: d0, d1 at row g, columns 2t, 2t+1; d2, d3 at row g+8. With N even a float2 store is 8-byte aligned
    // (col is even) and col < N implies col + 1 < N.
    const int g = lane / 4, t = lane % 4;
    const bool even = (N % 2) == 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int col = n0 + wn * 64 + j * 8 + 2 * t;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = m0 + wm * 64 + i * 16 + g + 8 * h;
                if (row < M && col < N) {
                    float* p = C + (size_t)row * N + col;
                    if (even) {
                        *reinterpret_cast<float2*>(p) = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
                    } else {
                        p[0] = acc[i][j][2 * h];
                        if (col + 1 < N)
                            p[1] = acc[i][j][2 * h + 1];
                    }
                }
            }
        }
    }
}
