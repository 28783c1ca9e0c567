// conv-gemm-smem-tiling on the implicit GEMM: a 128 (pixels m) x 64 (filters k) tile of y per group of 256,
// slices of BK = 16 taps staged g-major in groupshared, each thread an 8 x 4 register tile, the next slice
// prefetched into registers while the current one is multiplied.
// peak: entry=main groups=(cdiv(K, 64), cdiv(N * ((H + 2 * PAD - DIL * (R - 1) - 1) // STRIDE + 1) * ((W + 2 * PAD - DIL * (S - 1) - 1) // STRIDE + 1), 128), 1)
struct Params { uint N; uint H; uint W; uint C; uint K; uint R; uint S; uint STRIDE; uint PAD; uint DIL; uint P; uint Q; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] StructuredBuffer<float> w;
[[vk::binding(2)]] RWStructuredBuffer<float> y;

#define BM 128
#define BN 64
#define BK 16
groupshared float As[BK][BM + 4];
groupshared float Bs[BK][BN + 4];

// A[m][g] of the implicit GEMM: x at tap g = (r, s, c) of pixel m, 0 in the padding or past G.
float loadA(bool pixel, uint n, int h0, int v0, uint g, uint G) {
    if (!pixel || g >= G) return 0.0;
    uint c = g % p.C, rs = g / p.C;
    uint s = rs % p.S, r = rs / p.S;
    int h = h0 + int(r * p.DIL), v = v0 + int(s * p.DIL);
    if (h < 0 || h >= int(p.H) || v < 0 || v >= int(p.W)) return 0.0;
    return x[((n * p.H + uint(h)) * p.W + uint(v)) * p.C + c];
}

[numthreads(256, 1, 1)]
void main(uint3 gid : SV_GroupID, uint t : SV_GroupIndex) {
    uint M = p.N * p.P * p.Q, G = p.R * p.S * p.C;
    uint m0 = gid.y * BM, k0 = gid.x * BN;
    uint tx = t % 16, ty = t / 16;  // this thread's y tile: pixels m0 + ty*8 .. +7, filters k0 + tx*4 .. +3

    // Loader roles: A pixel row t/2, taps (t%2)*8 .. +7; B filter row t/4, taps (t%4)*4 .. +3.
    uint am = m0 + t / 2, ag = (t % 2) * 8;
    bool apix = am < M;
    uint aq = am % p.Q, apq = am / p.Q;
    uint an = apq / p.P;
    int ah0 = int((apq % p.P) * p.STRIDE) - int(p.PAD), av0 = int(aq * p.STRIDE) - int(p.PAD);
    uint bk = k0 + t / 4, bg = (t % 4) * 4;
    bool bfil = bk < p.K;

    float ra[8], rb[4];
    [unroll] for (uint i = 0; i < 8; ++i) ra[i] = loadA(apix, an, ah0, av0, ag + i, G);
    [unroll] for (uint j = 0; j < 4; ++j) rb[j] = (bfil && bg + j < G) ? w[bk * G + bg + j] : 0.0;

    float acc[8][4];
    [unroll] for (uint i = 0; i < 8; ++i) [unroll] for (uint j = 0; j < 4; ++j) acc[i][j] = 0.0;

    for (uint g0 = 0; g0 < G; g0 += BK) {
        [unroll] for (uint i = 0; i < 8; ++i) As[ag + i][t / 2] = ra[i];
        [unroll] for (uint j = 0; j < 4; ++j) Bs[bg + j][t / 4] = rb[j];
        GroupMemoryBarrierWithGroupSync();
        // Prefetch the next slice into registers: its global latency overlaps the multiply below.
        uint gn = g0 + BK;
        [unroll] for (uint i = 0; i < 8; ++i) ra[i] = loadA(apix, an, ah0, av0, gn + ag + i, G);
        [unroll] for (uint j = 0; j < 4; ++j) rb[j] = (bfil && gn + bg + j < G) ? w[bk * G + gn + bg + j] : 0.0;
        [unroll] for (uint kk = 0; kk < BK; ++kk) {
            float a[8], b[4];
            [unroll] for (uint i = 0; i < 8; ++i) a[i] = As[kk][ty * 8 + i];
            [unroll] for (uint j = 0; j < 4; ++j) b[j] = Bs[kk][tx * 4 + j];
            [unroll] for (uint i = 0; i < 8; ++i) [unroll] for (uint j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
        }
        GroupMemoryBarrierWithGroupSync();
    }
    [unroll] for (uint i = 0; i < 8; ++i) {
        uint m = m0 + ty * 8 + i;
        if (m >= M) continue;
        [unroll] for (uint j = 0; j < 4; ++j) {
            uint k = k0 + tx * 4 + j;
            if (k < p.K) y[m * p.K + k] = acc[i][j];
        }
    }
}
