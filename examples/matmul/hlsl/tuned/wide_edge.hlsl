// Edge-tile specialization on the vectorized wide tile (128x256 per 256-thread group, 8x16 per thread, two
// groupshared stages, B and C through float4 views of their bindings). The K loop is written once as a macro and
// expanded twice under a group-uniform [branch]: fast groups (the whole tile inside C, K % BK == 0, N % 4 == 0)
// run a copy whose loads have no bounds checks and no per-load `fast` test; edge groups run the zero-filling copy.
// A is read as in the scalar kernel (4 rows at one k): the float4-along-k variant was slower on an H100, its
// transposed scalar stores costing more than the loads saved.
// Threads form a 16x16 grid (rows 4 * ty + {0, 64}, columns 4 * tx + 64 * j): on an H100 it timed level with the
// wave layout (a wave over 64x64 of C), slightly ahead.
// The A tile is swizzled (row group g of slice k at As[k][g ^ (k % 8)]) so transposed stores do not pile onto
// the same banks; two stages of (128 + 256) x BK floats are 24 KB at BK=8, 48 KB (NVIDIA's Vulkan limit) at 16.
// peak: entry=main groups=(cdiv(N, 256), cdiv(M, 128), 1)
// peak: params BK=[8, 16]
#define BM 128
#define BN 256
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> A;
[[vk::binding(1)]] StructuredBuffer<float> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;
[[vk::binding(1)]] StructuredBuffer<float4> B4;  // the same buffers seen as float4: fast groups only
[[vk::binding(2)]] RWStructuredBuffer<float4> C4;

groupshared float4 As[2][BK][BM / 4];  // As[s][k][(m / 4) ^ (k % 8)] holds A[m0 + m .. m0 + m + 3][k0 + k]
groupshared float4 Bs[2][BK][BN / 4];  // Bs[s][k][n / 4] holds B[k0 + k][n0 + n .. n0 + n + 3]

float loadA(uint m, uint k)
{
    float v = 0.0;
    if (m < p.M && k < p.K) v = A[m * p.K + k];
    return v;
}

float loadB(uint k, uint n)
{
    float v = 0.0;
    if (k < p.K && n < p.N) v = B[k * p.N + n];
    return v;
}

// Thread tid's share of a K-slice, pass j of BK / 8 for A and of BK / 4 for B. A: 4 consecutive rows at one k;
// B: 4 consecutive columns of one row (a wave reads 512 bytes). `fast` is a literal in each expansion of KLOOP.
float4 fetchA(uint m0, uint k0, uint tid, uint j, bool fast)
{
    const uint k = k0 + tid % BK, m = m0 + (tid / BK + j * (256 / BK)) * 4;
    if (fast) {
        const uint at = m * p.K + k;
        return float4(A[at], A[at + p.K], A[at + 2 * p.K], A[at + 3 * p.K]);
    }
    return float4(loadA(m, k), loadA(m + 1, k), loadA(m + 2, k), loadA(m + 3, k));
}

float4 fetchB(uint n0, uint k0, uint tid, uint j, bool fast)
{
    const uint k = k0 + tid / (BN / 4) + j * (256 / (BN / 4)), n = n0 + (tid % (BN / 4)) * 4;
    if (fast) return B4[(k * p.N + n) / 4];
    return float4(loadB(k, n), loadB(k, n + 1), loadB(k, n + 2), loadB(k, n + 3));
}

void storeRow(uint row, uint col, float4 v, bool fast)
{
    if (fast) {
        C4[(row * p.N + col) / 4] = v;
        return;
    }
    if (row >= p.M) return;
    const uint at = row * p.N + col;
    if (col + 3 < p.N) {
        C[at] = v.x; C[at + 1] = v.y; C[at + 2] = v.z; C[at + 3] = v.w;
        return;
    }
    if (col < p.N) C[at] = v.x;
    if (col + 1 < p.N) C[at + 1] = v.y;
    if (col + 2 < p.N) C[at + 2] = v.z;
}

// One row of the micro-tile: its four groups of 4 columns.
#define FMA_ROW(q0, q1, q2, q3, s) q0 = mad(s, b0, q0); q1 = mad(s, b1, q1); q2 = mad(s, b2, q2); q3 = mad(s, b3, q3);

// The next slice into registers (ra*, rb*), and registers into stage s.
// Registers into stage s (A transposed and swizzled), and the next slice into registers.
#define STASH_A(s, ra, j) As[s][tid % BK][(tid / BK + j * (256 / BK)) ^ (tid % 8)] = ra;
#if BK == 16
#define FETCH(k0, fast) \
    ra0 = fetchA(m0, k0, tid, 0, fast); ra1 = fetchA(m0, k0, tid, 1, fast); \
    rb0 = fetchB(n0, k0, tid, 0, fast); rb1 = fetchB(n0, k0, tid, 1, fast); \
    rb2 = fetchB(n0, k0, tid, 2, fast); rb3 = fetchB(n0, k0, tid, 3, fast);
#define STASH(s) \
    STASH_A(s, ra0, 0) STASH_A(s, ra1, 1) \
    Bs[s][tid / 64][tid % 64] = rb0; Bs[s][tid / 64 + 4][tid % 64] = rb1; \
    Bs[s][tid / 64 + 8][tid % 64] = rb2; Bs[s][tid / 64 + 12][tid % 64] = rb3;
#else
#define FETCH(k0, fast) \
    ra0 = fetchA(m0, k0, tid, 0, fast); rb0 = fetchB(n0, k0, tid, 0, fast); rb1 = fetchB(n0, k0, tid, 1, fast);
#define STASH(s) \
    STASH_A(s, ra0, 0) \
    Bs[s][tid / 64][tid % 64] = rb0; Bs[s][tid / 64 + 4][tid % 64] = rb1;
#endif

// One K loop: prefetch the next slice into registers, multiply the current stage, stash, one barrier.
#define KLOOP(fast) \
    FETCH(0, fast) \
    STASH(0) \
    GroupMemoryBarrierWithGroupSync(); \
    for (uint t = 0; t < T; ++t) { \
        const uint cur = t & 1; \
        const bool more = t + 1 < T; /* uniform */ \
        if (more) { FETCH((t + 1) * BK, fast) } /* in flight during the multiply */ \
        [unroll] for (uint k = 0; k < BK; ++k) { \
            const float4 a0 = As[cur][k][ty ^ (k % 8)], a1 = As[cur][k][(ty + AOFF) ^ (k % 8)]; \
            const float4 b0 = Bs[cur][k][tx], b1 = Bs[cur][k][tx + BOFF]; \
            const float4 b2 = Bs[cur][k][tx + 2 * BOFF], b3 = Bs[cur][k][tx + 3 * BOFF]; \
            FMA_ROW(c00, c01, c02, c03, a0.x) FMA_ROW(c10, c11, c12, c13, a0.y) \
            FMA_ROW(c20, c21, c22, c23, a0.z) FMA_ROW(c30, c31, c32, c33, a0.w) \
            FMA_ROW(c40, c41, c42, c43, a1.x) FMA_ROW(c50, c51, c52, c53, a1.y) \
            FMA_ROW(c60, c61, c62, c63, a1.z) FMA_ROW(c70, c71, c72, c73, a1.w) \
        } \
        if (more) { STASH(cur ^ 1) } /* stage cur ^ 1 was last read before the previous barrier */ \
        GroupMemoryBarrierWithGroupSync(); \
    }

[numthreads(256, 1, 1)]
void main(uint tid : SV_GroupIndex, uint3 gid : SV_GroupID)
{
    const uint m0 = gid.y * BM, n0 = gid.x * BN;
    const uint ty = tid / 16, tx = tid % 16;
#define AOFF 16
#define BOFF 16
    float4 c00 = 0.0, c01 = 0.0, c02 = 0.0, c03 = 0.0;
    float4 c10 = 0.0, c11 = 0.0, c12 = 0.0, c13 = 0.0;
    float4 c20 = 0.0, c21 = 0.0, c22 = 0.0, c23 = 0.0;
    float4 c30 = 0.0, c31 = 0.0, c32 = 0.0, c33 = 0.0;
    float4 c40 = 0.0, c41 = 0.0, c42 = 0.0, c43 = 0.0;
    float4 c50 = 0.0, c51 = 0.0, c52 = 0.0, c53 = 0.0;
    float4 c60 = 0.0, c61 = 0.0, c62 = 0.0, c63 = 0.0;
    float4 c70 = 0.0, c71 = 0.0, c72 = 0.0, c73 = 0.0;
    float4 ra0, ra1, rb0, rb1, rb2, rb3;

    const uint T = (p.K + BK - 1) / BK;
    const bool fast = m0 + BM <= p.M && n0 + BN <= p.N && p.K % BK == 0 && p.N % 4 == 0;  // uniform
    [branch] if (fast) {
        KLOOP(true)
    } else {
        KLOOP(false)
    }

    const uint r0 = m0 + ty * 4, r1 = r0 + 4 * AOFF, cA = n0 + tx * 4, cB = cA + 4 * BOFF;
    const uint cC = cB + 4 * BOFF, cD = cC + 4 * BOFF;
    storeRow(r0 + 0, cA, c00, fast); storeRow(r0 + 0, cB, c01, fast);
    storeRow(r0 + 0, cC, c02, fast); storeRow(r0 + 0, cD, c03, fast);
    storeRow(r0 + 1, cA, c10, fast); storeRow(r0 + 1, cB, c11, fast);
    storeRow(r0 + 1, cC, c12, fast); storeRow(r0 + 1, cD, c13, fast);
    storeRow(r0 + 2, cA, c20, fast); storeRow(r0 + 2, cB, c21, fast);
    storeRow(r0 + 2, cC, c22, fast); storeRow(r0 + 2, cD, c23, fast);
    storeRow(r0 + 3, cA, c30, fast); storeRow(r0 + 3, cB, c31, fast);
    storeRow(r0 + 3, cC, c32, fast); storeRow(r0 + 3, cD, c33, fast);
    storeRow(r1 + 0, cA, c40, fast); storeRow(r1 + 0, cB, c41, fast);
    storeRow(r1 + 0, cC, c42, fast); storeRow(r1 + 0, cD, c43, fast);
    storeRow(r1 + 1, cA, c50, fast); storeRow(r1 + 1, cB, c51, fast);
    storeRow(r1 + 1, cC, c52, fast); storeRow(r1 + 1, cD, c53, fast);
    storeRow(r1 + 2, cA, c60, fast); storeRow(r1 + 2, cB, c61, fast);
    storeRow(r1 + 2, cC, c62, fast); storeRow(r1 + 2, cD, c63, fast);
    storeRow(r1 + 3, cA, c70, fast); storeRow(r1 + 3, cB, c71, fast);
    storeRow(r1 + 3, cC, c72, fast); storeRow(r1 + 3, cD, c73, fast);
}
