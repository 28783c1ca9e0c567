// Wave tiling on the double-buffered kernel: the same 128x128 group tile, 8x8 outputs per thread, two
// groupshared stages, but each 32-thread wave (SV_GroupIndex / 32, NVIDIA's wave size; correctness never
// depends on it, only the speed) owns a compact 64x32 block of C: waves 2 (M) x 4 (N), lanes 8 (M) x 4 (N),
// each lane 2x2 sub-tiles of 4x4. Per k a wave's A reads then touch 8 float4 (128 bytes) and its B reads 4, one
// bank pass each, instead of 2 and 16 (the 16 of B taking two passes) with the 16x16 thread grid.
// No data crosses lanes: the operands still come from groupshared memory (a float4 broadcast read moves four
// values, a WaveReadLaneAt one), so no wave intrinsic is needed and any wave size gives the same results.
// The A tile is swizzled (row group g of slice k at As[k][g ^ (k % 8)]) so the transposed stores of a wave's
// 16 values of k do not share banks; two stages of 128x16 tiles are 32 KB, lavapipe's groupshared limit.
// Interior groups load without bounds checks (a uniform test); edge groups zero-fill.
// peak: entry=main groups=(cdiv(N, 128), cdiv(M, 128), 1)
// peak: params BK=[16, 8]
#define BM 128
#define BN 128
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

// Thread tid's share of a K-slice, pass j of BK / 8: A, 4 consecutive rows at one k; B, 4 consecutive columns
// of one row (a warp reads 512 contiguous bytes).
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

// One row of the micro-tile: its left (lo) and right (hi) 4 columns.
#define FMA_ROW(lo, hi, s) lo = mad(s, b0, lo); hi = mad(s, b1, hi);

[numthreads(256, 1, 1)]
void main(uint tid : SV_GroupIndex, uint3 gid : SV_GroupID)
{
    const uint m0 = gid.y * BM, n0 = gid.x * BN;
    const uint w = tid / 32, l = tid % 32;
    const uint ty = (w / 4) * 16 + (l / 4), tx = (w % 4) * 8 + (l % 4);  // float4 row group and column of (0, 0)
    const bool fast = m0 + BM <= p.M && n0 + BN <= p.N && p.K % BK == 0;  // uniform over the group
    float4 c00 = 0.0, c01 = 0.0, c10 = 0.0, c11 = 0.0, c20 = 0.0, c21 = 0.0, c30 = 0.0, c31 = 0.0;
    float4 c40 = 0.0, c41 = 0.0, c50 = 0.0, c51 = 0.0, c60 = 0.0, c61 = 0.0, c70 = 0.0, c71 = 0.0;

    float4 ra0 = fetchA(m0, 0, tid, 0, fast), rb0 = fetchB(n0, 0, tid, 0, fast);
#if BK == 16
    float4 ra1 = fetchA(m0, 0, tid, 1, fast), rb1 = fetchB(n0, 0, tid, 1, fast);
#endif
    As[0][tid % BK][(tid / BK) ^ (tid % 8)] = ra0;
    Bs[0][tid / (BN / 4)][tid % (BN / 4)] = rb0;
#if BK == 16
    As[0][tid % BK][(tid / BK + 256 / BK) ^ (tid % 8)] = ra1;
    Bs[0][tid / (BN / 4) + 8][tid % (BN / 4)] = rb1;
#endif
    GroupMemoryBarrierWithGroupSync();

    const uint T = (p.K + BK - 1) / BK;
    for (uint t = 0; t < T; ++t) {
        const uint cur = t & 1;
        const bool more = t + 1 < T;  // uniform
        if (more) {  // in flight during the multiply below
            ra0 = fetchA(m0, (t + 1) * BK, tid, 0, fast); rb0 = fetchB(n0, (t + 1) * BK, tid, 0, fast);
#if BK == 16
            ra1 = fetchA(m0, (t + 1) * BK, tid, 1, fast); rb1 = fetchB(n0, (t + 1) * BK, tid, 1, fast);
#endif
        }
        [unroll] for (uint k = 0; k < BK; ++k) {
            const float4 a0 = As[cur][k][ty ^ (k % 8)], a1 = As[cur][k][(ty + 8) ^ (k % 8)];
            const float4 b0 = Bs[cur][k][tx], b1 = Bs[cur][k][tx + 4];
            FMA_ROW(c00, c01, a0.x) FMA_ROW(c10, c11, a0.y) FMA_ROW(c20, c21, a0.z) FMA_ROW(c30, c31, a0.w)
            FMA_ROW(c40, c41, a1.x) FMA_ROW(c50, c51, a1.y) FMA_ROW(c60, c61, a1.z) FMA_ROW(c70, c71, a1.w)
        }
        if (more) {  // stage cur ^ 1 was last read before the previous barrier
            As[cur ^ 1][tid % BK][(tid / BK) ^ (tid % 8)] = ra0;
            Bs[cur ^ 1][tid / (BN / 4)][tid % (BN / 4)] = rb0;
#if BK == 16
            As[cur ^ 1][tid % BK][(tid / BK + 256 / BK) ^ (tid % 8)] = ra1;
            Bs[cur ^ 1][tid / (BN / 4) + 8][tid % (BN / 4)] = rb1;
#endif
        }
        GroupMemoryBarrierWithGroupSync();
    }

    const uint r0 = m0 + ty * 4, r1 = r0 + 32, cA = n0 + tx * 4, cB = cA + 16;
    storeRow(r0 + 0, cA, c00); storeRow(r0 + 0, cB, c01);
    storeRow(r0 + 1, cA, c10); storeRow(r0 + 1, cB, c11);
    storeRow(r0 + 2, cA, c20); storeRow(r0 + 2, cB, c21);
    storeRow(r0 + 3, cA, c30); storeRow(r0 + 3, cB, c31);
    storeRow(r1 + 0, cA, c40); storeRow(r1 + 0, cB, c41);
    storeRow(r1 + 1, cA, c50); storeRow(r1 + 1, cB, c51);
    storeRow(r1 + 2, cA, c60); storeRow(r1 + 2, cB, c61);
    storeRow(r1 + 3, cA, c70); storeRow(r1 + 3, cB, c71);
}
