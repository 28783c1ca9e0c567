// peak: entry=conv3x3_relu_bias grid=(cdiv(BATCH_SIZE * (HEIGHT - 2) * (WIDTH - 2), 128), 1, 1) block=(256, 1, 1) shared=107520
// out = relu(conv2d(x, W, conv_bias)) + bias   (3x3, stride 1, no padding; NCHW x, KCRS W, 128 filters)
// Implicit GEMM: Y[m][k] = sum_g A[m][g] * W[k][g], m = (n, p, q) output pixel, g = (c, r, s) tap
// (g = c*9 + r*3 + s, W's own row layout), A[m][g] = x[n][c][p + r][q + s] gathered on the fly.
// Block tile 128 pixels x 128 filters (all of them) x 32 taps; 8 warps as 2 (M) x 4 (N), 64x32 warp tiles.
// 3xTF32 tensor cores (mma.sync m16n8k8, hi/lo split, per-K-tile partials added in f32: f32 accuracy).
// 3-stage cp.async pipeline: A^T tile [BK][BM + 8] by 4-byte gathers (consecutive threads = consecutive
// pixels), W tile [128][BK + 4] by 16-byte copies when C % 4 == 0 (4-byte otherwise), zero fill outside.
#define BM 128
#define BN 128
#define BK 32
#define LDA (BM + 8)
#define LDB (BK + 4)
#define STAGES 3
#define NT 256
#define WM 64
#define WN 32
#define MI (WM / 16)
#define NI (WN / 8)
#define KOUT 128

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

extern "C" __global__ void __launch_bounds__(NT, 1)
conv3x3_relu_bias(const float* __restrict__ x, const float* __restrict__ bias,
                  const float* __restrict__ conv_weight, const float* __restrict__ conv_bias,
                  float* __restrict__ out, int BATCH_SIZE, int IN_CHANNELS, int HEIGHT, int WIDTH)
{
    extern __shared__ __align__(16) float smem[];
    const int C = IN_CHANNELS, H = HEIGHT, W = WIDTH;
    const int P = H - 2, Q = W - 2;
    const int PQ = P * Q;
    const int M = BATCH_SIZE * PQ;
    const int G = C * 9;
    const int HW = H * W;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / (BN / WN), wn = warp % (BN / WN);
    const int g8 = lane >> 2, t = lane & 3;
    const int m0 = blockIdx.x * BM;
    const bool vecB = (G & 3) == 0;
    const unsigned sbase = (unsigned)__cvta_generic_to_shared(smem);
    const unsigned stageA = BK * LDA * 4, stageB = BN * LDB * 4;
    const unsigned sA0 = sbase, sB0 = sbase + STAGES * stageA;

    // this thread's gather pixel (fixed for the whole K loop)
    const int am = tid & (BM - 1), ag0 = tid / BM;   // ag0 in {0, 1}
    const int mg = m0 + am;
    const bool mvalid = mg < M;
    const float* xpix = x;
    if (mvalid) {
        const int n = mg / PQ, rem = mg - n * PQ;
        const int p = rem / Q, q = rem - p * Q;
        xpix = x + (size_t)n * C * HW + (size_t)p * W + q;
    }

    auto load_stage = [&](int st, int k0) {
        const unsigned sA = sA0 + st * stageA, sB = sB0 + st * stageB;
#pragma unroll
        for (int i = 0; i < BK / 2; ++i) {
            const int gl = ag0 + 2 * i;
            const int g = k0 + gl;
            const bool ok = mvalid && g < G;
            const int c = g / 9, rs = g - c * 9;
            const int r = rs / 3, s = rs - r * 3;
            const float* p = ok ? xpix + (size_t)c * HW + r * W + s : x;
            cp4(sA + (unsigned)(gl * LDA + am) * 4u, p, ok ? 4 : 0);
        }
        if (vecB) {
#pragma unroll
            for (int i = 0; i < (BN * BK / 4) / NT; ++i) {
                const int idx = tid + i * NT;
                const int r = idx / (BK / 4), c = (idx % (BK / 4)) * 4;
                const int gk = k0 + c;
                const bool ok = gk < G;   // r < 128 = KOUT always
                const float* p = ok ? conv_weight + (size_t)r * G + gk : conv_weight;
                cp16(sB + (unsigned)(r * LDB + c) * 4u, p, ok ? 16 : 0);
            }
        } else {
#pragma unroll 4
            for (int i = 0; i < (BN * BK) / NT; ++i) {
                const int idx = tid + i * NT;
                const int r = idx / BK, c = idx % BK;
                const int gk = k0 + c;
                const bool ok = gk < G;
                const float* p = ok ? conv_weight + (size_t)r * G + gk : conv_weight;
                cp4(sB + (unsigned)(r * LDB + c) * 4u, p, ok ? 4 : 0);
            }
        }
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    const int T = (G + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < T) load_stage(s, s * BK);
        cp_commit();
    }
    const unsigned bOff = (unsigned)((wn * WN + (lane & 7) + ((lane >> 4) << 3)) * LDB + ((lane >> 3) & 1) * 4) * 4u;
    const int aRow = wm * WM + g8;   // pixel row within the tile of this lane's a0

    for (int kt = 0; kt < T; ++kt) {
        cp_wait();
        __syncthreads();
        {
            const int nt = kt + STAGES - 1;
            if (nt < T) load_stage(nt % STAGES, nt * BK);
            cp_commit();
        }
        const int st = kt % STAGES;
        const float* As = smem + st * (BK * LDA);
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
                ldsm_x4(r, sB + (unsigned)(jj * 8 * LDB + kk) * 4u);
                split_tf32(r[0], bHi[jj][0], bLo[jj][0]);
                split_tf32(r[1], bHi[jj][1], bLo[jj][1]);
                split_tf32(r[2], bHi[jj + 1][0], bLo[jj + 1][0]);
                split_tf32(r[3], bHi[jj + 1][1], bLo[jj + 1][1]);
            }
            const float* a0p = As + (kk + t) * LDA + aRow;
            const float* a2p = As + (kk + t + 4) * LDA + aRow;
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                unsigned raw[4], aHi[4], aLo[4];
                raw[0] = __float_as_uint(a0p[i * 16]);
                raw[1] = __float_as_uint(a0p[i * 16 + 8]);
                raw[2] = __float_as_uint(a2p[i * 16]);
                raw[3] = __float_as_uint(a2p[i * 16 + 8]);
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

    // epilogue: v = relu(acc + conv_bias[k]) + bias[k]; out[n][k][p][q]
    float cb[NI][2], bb[NI][2];
#pragma unroll
    for (int j = 0; j < NI; ++j) {
        const int k = wn * WN + j * 8 + 2 * t;
        cb[j][0] = __ldg(conv_bias + k); cb[j][1] = __ldg(conv_bias + k + 1);
        bb[j][0] = __ldg(bias + k);      bb[j][1] = __ldg(bias + k + 1);
    }
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = m0 + wm * WM + i * 16 + g8 + h * 8;
            if (m >= M) continue;
            const int n = m / PQ, rem = m - n * PQ;
            float* op = out + (size_t)n * KOUT * PQ + rem;
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const int k = wn * WN + j * 8 + 2 * t;
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    float v = acc[i][j][2 * h + e] + cb[j][e];
                    v = v > 0.f ? v : 0.f;
                    __stcs(op + (size_t)(k + e) * PQ, v + bb[j][e]);
                }
            }
        }
    }
}
