// peak: entry=gemm_mul_lrelu grid=(cdiv(BATCH_SIZE, 128), cdiv(8192, 128), 1) block=(256, 1, 1) shared=110592
// out = leaky_relu((x @ W^T + b) * 2.0, 0.1);  x: BATCH_SIZE x IN_FEATURES, W: 8192 x IN_FEATURES,
// b: 8192, out: BATCH_SIZE x 8192.  (M = BATCH_SIZE, N = 8192, K = IN_FEATURES; both operands K-major.)
// 3xTF32 on tensor cores (mma.sync m16n8k8): each operand split into TF32 hi + lo, lo*hi + hi*lo + hi*hi
// accumulated per K tile in `part` and added to the f32 accumulators (keeps f32 accuracy).
// 128x128x32 block tile, 8 warps as 2 (M) x 4 (N), 64x32 warp tiles; 3-stage cp.async pipeline
// (16-byte copies when K % 4 == 0, 4-byte otherwise, zero fill outside the matrices); both tiles stored
// [row][BK + 4] (144-byte rows: conflict-free ldmatrix). M tiles vary fastest in the grid, so the
// blocks running together share W panels in L2.
#define BM 128
#define BN 128
#define BK 32
#define LDS (BK + 4)
#define STAGES 3
#define NT 256
#define WM 64
#define WN 32
#define MI (WM / 16)
#define NI (WN / 8)
#define NOUT 8192
#define MULT 2.0f
#define SLOPE 0.1f

__device__ __forceinline__ unsigned tf32_rna(unsigned x) { return (x + 0x1000u) & 0xffffe000u; }
__device__ __forceinline__ void split_tf32(unsigned x, unsigned& hi, unsigned& lo) {
    hi = tf32_rna(x);
    lo = tf32_rna(__float_as_uint(__uint_as_float(x) - __uint_as_float(hi)));
}
__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void mma1688(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void cp16(unsigned s, const void* g, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(s), "l"(g), "r"(bytes));
}
__device__ __forceinline__ void cp4(unsigned s, const void* g, int bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(s), "l"(g), "r"(bytes));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(STAGES - 2)); }

// copy rows [r0, r0 + 128) x k-columns [k0, k0 + BK) of src (rows x K, row-major) into a [128][LDS] tile
__device__ __forceinline__ void load_tile(unsigned sdst, const float* __restrict__ src, int r0, int rows,
                                          int k0, int K, bool vec, int tid) {
    if (vec) {
#pragma unroll
        for (int i = 0; i < (128 * BK / 4) / NT; ++i) {
            const int idx = tid + i * NT;
            const int r = idx / (BK / 4), c = (idx % (BK / 4)) * 4;
            const int gr = r0 + r, gk = k0 + c;
            const bool ok = gr < rows && gk < K;
            const float* p = ok ? src + (size_t)gr * K + gk : src;
            cp16(sdst + (unsigned)(r * LDS + c) * 4u, p, ok ? 16 : 0);
        }
    } else {
#pragma unroll 4
        for (int i = 0; i < (128 * BK) / NT; ++i) {
            const int idx = tid + i * NT;
            const int r = idx / BK, c = idx % BK;
            const int gr = r0 + r, gk = k0 + c;
            const bool ok = gr < rows && gk < K;
            const float* p = ok ? src + (size_t)gr * K + gk : src;
            cp4(sdst + (unsigned)(r * LDS + c) * 4u, p, ok ? 4 : 0);
        }
    }
}

extern "C" __global__ void __launch_bounds__(NT, 1)
gemm_mul_lrelu(const float* __restrict__ x, const float* __restrict__ gemm_weight,
               const float* __restrict__ gemm_bias, float* __restrict__ out,
               int BATCH_SIZE, int IN_FEATURES)
{
    extern __shared__ __align__(16) float smem[];
    const int M = BATCH_SIZE, K = IN_FEATURES;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / (BN / WN), wn = warp % (BN / WN);
    const int g = lane >> 2, t = lane & 3;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const bool vec = (K & 3) == 0;
    const unsigned sbase = (unsigned)__cvta_generic_to_shared(smem);
    const unsigned stageA = BM * LDS * 4, stageB = BN * LDS * 4;
    const unsigned sA0 = sbase, sB0 = sbase + STAGES * stageA;

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    const int T = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < T) {
            load_tile(sA0 + s * stageA, x, m0, M, s * BK, K, vec, tid);
            load_tile(sB0 + s * stageB, gemm_weight, n0, NOUT, s * BK, K, vec, tid);
        }
        cp_commit();
    }

    // per-lane ldmatrix offsets (bytes) within a stage
    const unsigned aOff = (unsigned)((wm * WM + (lane & 15)) * LDS + (lane >> 4) * 4) * 4u;
    const unsigned bOff = (unsigned)((wn * WN + (lane & 7) + ((lane >> 4) << 3)) * LDS + ((lane >> 3) & 1) * 4) * 4u;

    for (int kt = 0; kt < T; ++kt) {
        cp_wait();
        __syncthreads();
        {
            const int nt = kt + STAGES - 1;
            if (nt < T) {
                const int st = nt % STAGES;
                load_tile(sA0 + st * stageA, x, m0, M, nt * BK, K, vec, tid);
                load_tile(sB0 + st * stageB, gemm_weight, n0, NOUT, nt * BK, K, vec, tid);
            }
            cp_commit();
        }
        const int st = kt % STAGES;
        const unsigned sA = sA0 + st * stageA + aOff;
        const unsigned sB = sB0 + st * stageB + bOff;

        float part[MI][NI][4];
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) part[i][j][e] = 0.f;

#pragma unroll
        for (int kk = 0; kk < BK; kk += 8) {
            unsigned bHi[NI][2], bLo[NI][2];
#pragma unroll
            for (int jj = 0; jj < NI; jj += 2) {
                unsigned r[4];
                ldsm_x4(r, sB + (unsigned)(jj * 8 * LDS + kk) * 4u);
                split_tf32(r[0], bHi[jj][0], bLo[jj][0]);
                split_tf32(r[1], bHi[jj][1], bLo[jj][1]);
                split_tf32(r[2], bHi[jj + 1][0], bLo[jj + 1][0]);
                split_tf32(r[3], bHi[jj + 1][1], bLo[jj + 1][1]);
            }
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                unsigned raw[4], aHi[4], aLo[4];
                ldsm_x4(raw, sA + (unsigned)(i * 16 * LDS + kk) * 4u);
#pragma unroll
                for (int r = 0; r < 4; ++r) split_tf32(raw[r], aHi[r], aLo[r]);
#pragma unroll
                for (int j = 0; j < NI; ++j) mma1688(part[i][j], aLo, bHi[j][0], bHi[j][1]);
#pragma unroll
                for (int j = 0; j < NI; ++j) mma1688(part[i][j], aHi, bLo[j][0], bLo[j][1]);
#pragma unroll
                for (int j = 0; j < NI; ++j) mma1688(part[i][j], aHi, bHi[j][0], bHi[j][1]);
            }
        }
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] += part[i][j][e];
    }
    asm volatile("cp.async.wait_group 0;\n" ::);

    // epilogue: (acc + b) * 2, LeakyReLU(0.1); float2 stores (N = 8192 is even, col even)
#pragma unroll
    for (int j = 0; j < NI; ++j) {
        const int col = n0 + wn * WN + j * 8 + 2 * t;
        if (col >= NOUT) continue;
        const float b0 = __ldg(gemm_bias + col), b1 = __ldg(gemm_bias + col + 1);
#pragma unroll
        for (int i = 0; i < MI; ++i) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = m0 + wm * WM + i * 16 + g + h * 8;
                if (row < M) {
                    float v0 = (acc[i][j][2 * h] + b0) * MULT;
                    float v1 = (acc[i][j][2 * h + 1] + b1) * MULT;
                    v0 = v0 > 0.f ? v0 : v0 * SLOPE;
                    v1 = v1 > 0.f ? v1 : v1 * SLOPE;
                    *reinterpret_cast<float2*>(out + (size_t)row * NOUT + col) = make_float2(v0, v1);
                }
            }
        }
    }
}
