// A wider group tile on the wave-tiled, double-buffered kernel: 128x256 outputs per 256-thread group, 8x16 per
// thread (32 named float4 accumulators), so each groupshared float4 of A feeds 16 FMAs instead of 8 and each
// value loaded from global memory serves twice the outputs along N. Waves (SV_GroupIndex / 32) are 2 (M) x 4 (N),
// each owning 64x64 of C; lanes 8 (M) x 4 (N), each lane 2x4 sub-tiles of 4x4. Per k a wave reads 2 float4 of A
// (8 distinct, 128 bytes) and 4 of B (4 distinct): one bank pass each.
// Two groupshared stages of (128 + 256) x BK floats: 24 KB at BK=8, 48 KB at BK=16 (NVIDIA's Vulkan limit is
// 48 KB; lavapipe's 32 KB only fits BK=8). The A tile is swizzled (row group g of slice k at As[k][g ^ (k % 8)])
// so a wave's transposed stores do not share banks. Interior groups load without bounds checks (a uniform test);
// edge groups zero-fill.
// peak: entry=main groups=(cdiv(N, 256), cdiv(M, 128), 1)
// peak: params BK=[8, 16]
#define BM 128
#define BN 256
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> A;
[[vk::binding(1)]] StructuredBuffer<float> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;

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

// Thread tid's share of a K-slice. A, pass j of BK / 8: 4 consecutive rows at one k. B, pass j of BK / 4:
// 4 consecutive columns of one row (a wave reads 512 contiguous bytes).
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
    if (fast) {
        const uint at = k * p.N + n;
        return float4(B[at], B[at + 1], B[at + 2], B[at + 3]);
    }
    return float4(loadB(k, n), loadB(k, n + 1), loadB(k, n + 2), loadB(k, n + 3));
}

void storeRow(uint row, uint col, float4 v)
{
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
#if BK == 16
#define FETCH(k0) \
    ra0 = fetchA(m0, k0, tid, 0, fast); ra1 = fetchA(m0, k0, tid, 1, fast); \
    rb0 = fetchB(n0, k0, tid, 0, fast); rb1 = fetchB(n0, k0, tid, 1, fast); \
    rb2 = fetchB(n0, k0, tid, 2, fast); rb3 = fetchB(n0, k0, tid, 3, fast);
#define STASH(s) \
    As[s][tid % BK][(tid / BK) ^ (tid % 8)] = ra0; As[s][tid % BK][(tid / BK + 16) ^ (tid % 8)] = ra1; \
    Bs[s][tid / 64][tid % 64] = rb0; Bs[s][tid / 64 + 4][tid % 64] = rb1; \
    Bs[s][tid / 64 + 8][tid % 64] = rb2; Bs[s][tid / 64 + 12][tid % 64] = rb3;
#else
#define FETCH(k0) \
    ra0 = fetchA(m0, k0, tid, 0, fast); rb0 = fetchB(n0, k0, tid, 0, fast); rb1 = fetchB(n0, k0, tid, 1, fast);
#define STASH(s) \
    As[s][tid % BK][(tid / BK) ^ (tid % 8)] = ra0; \
    Bs[s][tid / 64][tid % 64] = rb0; Bs[s][tid / 64 + 4][tid % 64] = rb1;
#endif

[numthreads(256, 1, 1)]
void main(uint tid : SV_GroupIndex, uint3 gid : SV_GroupID)
{
    const uint m0 = gid.y * BM, n0 = gid.x * BN;
    const uint w = tid / 32, l = tid % 32;
    const uint ty = (w / 4) * 16 + (l / 4), tx = (w % 4) * 16 + (l % 4);  // float4 row group and column of (0, 0)
    const bool fast = m0 + BM <= p.M && n0 + BN <= p.N && p.K % BK == 0;  // uniform over the group
    float4 c00 = 0.0, c01 = 0.0, c02 = 0.0, c03 = 0.0;
    float4 c10 = 0.0, c11 = 0.0, c12 = 0.0, c13 = 0.0;
    float4 c20 = 0.0, c21 = 0.0, c22 = 0.0, c23 = 0.0;
    float4 c30 = 0.0, c31 = 0.0, c32 = 0.0, c33 = 0.0;
    float4 c40 = 0.0, c41 = 0.0, c42 = 0.0, c43 = 0.0;
    float4 c50 = 0.0, c51 = 0.0, c52 = 0.0, c53 = 0.0;
    float4 c60 = 0.0, c61 = 0.0, c62 = 0.0, c63 = 0.0;
    float4 c70 = 0.0, c71 = 0.0, c72 = 0.0, c73 = 0.0;
    float4 ra0, ra1, rb0, rb1, rb2, rb3;

    FETCH(0)
    STASH(0)
    GroupMemoryBarrierWithGroupSync();

    const uint T = (p.K + BK - 1) / BK;
    for (uint t = 0; t < T; ++t) {
        const uint cur = t & 1;
        const bool more = t + 1 < T;  // uniform
        if (more) {  // in flight during the multiply below
            FETCH((t + 1) * BK)
        }
        [unroll] for (uint k = 0; k < BK; ++k) {
            const float4 a0 = As[cur][k][ty ^ (k % 8)], a1 = As[cur][k][(ty + 8) ^ (k % 8)];
            const float4 b0 = Bs[cur][k][tx], b1 = Bs[cur][k][tx + 4];
            const float4 b2 = Bs[cur][k][tx + 8], b3 = Bs[cur][k][tx + 12];
            FMA_ROW(c00, c01, c02, c03, a0.x)
            FMA_ROW(c10, c11, c12, c13, a0.y)
            FMA_ROW(c20, c21, c22, c23, a0.z)
            FMA_ROW(c30, c31, c32, c33, a0.w)
            FMA_ROW(c40, c41, c42, c43, a1.x)
            FMA_ROW(c50, c51, c52, c53, a1.y)
            FMA_ROW(c60, c61, c62, c63, a1.z)
            FMA_ROW(c70, c71, c72, c73, a1.w)
        }
        if (more) {  // stage cur ^ 1 was last read before the previous barrier
            STASH(cur ^ 1)
        }
        GroupMemoryBarrierWithGroupSync();
    }

    const uint r0 = m0 + ty * 4, r1 = r0 + 32, cA = n0 + tx * 4, cB = cA + 16, cC = cA + 32, cD = cA + 48;
    storeRow(r0 + 0, cA, c00); storeRow(r0 + 0, cB, c01);
    storeRow(r0 + 0, cC, c02); storeRow(r0 + 0, cD, c03);
    storeRow(r0 + 1, cA, c10); storeRow(r0 + 1, cB, c11);
    storeRow(r0 + 1, cC, c12); storeRow(r0 + 1, cD, c13);
    storeRow(r0 + 2, cA, c20); storeRow(r0 + 2, cB, c21);
    storeRow(r0 + 2, cC, c22); storeRow(r0 + 2, cD, c23);
    storeRow(r0 + 3, cA, c30); storeRow(r0 + 3, cB, c31);
    storeRow(r0 + 3, cC, c32); storeRow(r0 + 3, cD, c33);
    storeRow(r1 + 0, cA, c40); storeRow(r1 + 0, cB, c41);
    storeRow(r1 + 0, cC, c42); storeRow(r1 + 0, cD, c43);
    storeRow(r1 + 1, cA, c50); storeRow(r1 + 1, cB, c51);
    storeRow(r1 + 1, cC, c52); storeRow(r1 + 1, cD, c53);
    storeRow(r1 + 2, cA, c60); storeRow(r1 + 2, cB, c61);
    storeRow(r1 + 2, cC, c62); storeRow(r1 + 2, cD, c63);
    storeRow(r1 + 3, cA, c70); storeRow(r1 + 3, cB, c71);
    storeRow(r1 + 3, cC, c72); storeRow(r1 + 3, cD, c73);
}
