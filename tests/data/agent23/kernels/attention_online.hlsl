// attention-online-tiling (HLSL): a group of 128 threads takes BM = 64 query rows of one head; two threads share
// a row, each holding half of q (pre-scaled by 1/sqrt(D)) and half of the output accumulator (DH floats each),
// the dot product completed across the pair with QuadReadAcrossX. K and V pass through groupshared in tiles of
// BN keys; the online rule rescales l and o when the max grows. D > 2*DH takes the general path (naive, one
// thread per row) in the same file. CAUSAL = 1: keys j <= i only, and the group stops at its last row's key.
// peak: entry=main groups=(cdiv(S, 64), H, B)
struct Params { uint B; uint H; uint S; uint D; uint CAUSAL; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> q;
[[vk::binding(1)]] StructuredBuffer<float> k;
[[vk::binding(2)]] StructuredBuffer<float> v;
[[vk::binding(3)]] RWStructuredBuffer<float> o;

#define BM 64
#define BN 32
#define DH 32
#define FLT_LOWEST -3.402823466e38
groupshared float Ks[BN][2 * DH];
groupshared float Vs[BN][2 * DH];

float dot_row(uint qb, uint kb) {
    float s = 0.0;
    for (uint d = 0; d < p.D; ++d) s += q[qb + d] * k[kb + d];
    return s;
}

// Any D: pass 1 finds m and l, pass 2 adds exp(s - m) / l * v_j into o (zeroed first).
void general_row(uint row, uint i, uint kv, float scale) {
    uint qb = row * p.D, last = p.CAUSAL != 0 ? i + 1 : p.S;
    float m = FLT_LOWEST, l = 0.0;
    for (uint j = 0; j < last; ++j) {
        float s = dot_row(qb, kv + j * p.D) * scale;
        float mn = max(m, s);
        l = l * exp(m - mn) + exp(s - mn);
        m = mn;
    }
    for (uint d = 0; d < p.D; ++d) o[qb + d] = 0.0;
    for (uint j2 = 0; j2 < last; ++j2) {
        float pj = exp(dot_row(qb, kv + j2 * p.D) * scale - m) / l;
        for (uint d2 = 0; d2 < p.D; ++d2) o[qb + d2] += pj * v[kv + j2 * p.D + d2];
    }
}

[numthreads(128, 1, 1)]
void main(uint3 gid : SV_GroupID, uint t : SV_GroupIndex) {
    uint head = gid.z * p.H + gid.y;
    uint kv = head * p.S * p.D;
    uint i0 = gid.x * BM;
    float scale = 1.0 / sqrt(float(p.D));
    if (p.D > 2 * DH) {  // the same for every thread of the dispatch: no barrier is split
        uint gi = i0 + t;
        if (t < BM && gi < p.S) general_row(head * p.S + gi, gi, kv, scale);
        return;
    }
    uint r = t / 2, half = t % 2;
    uint i = i0 + r;
    bool live = i < p.S;  // rows past S still take part in the barriers; only their stores are skipped
    float qr[DH], acc[DH];
    [unroll] for (uint d = 0; d < DH; ++d) {
        uint dd = half * DH + d;
        qr[d] = 0.0;
        acc[d] = 0.0;
        if (live && dd < p.D) qr[d] = q[(head * p.S + i) * p.D + dd] * scale;  // an if: ?: reads both sides
    }
    float m = FLT_LOWEST, l = 0.0;
    uint kend = p.CAUSAL != 0 ? min(p.S, i0 + BM) : p.S;  // the same for the whole group
    for (uint j0 = 0; j0 < kend; j0 += BN) {
        for (uint e = t; e < BN * 2 * DH; e += 128) {
            uint jj = e / (2 * DH), dd = e % (2 * DH);
            float kx = 0.0, vx = 0.0;
            if (j0 + jj < p.S && dd < p.D) {
                kx = k[kv + (j0 + jj) * p.D + dd];
                vx = v[kv + (j0 + jj) * p.D + dd];
            }
            Ks[jj][dd] = kx;
            Vs[jj][dd] = vx;
        }
        GroupMemoryBarrierWithGroupSync();
        uint jn = min(BN, kend - j0);
        for (uint jj2 = 0; jj2 < jn; ++jj2) {
            float s = 0.0;
            [unroll] for (uint d = 0; d < DH; ++d) s += qr[d] * Ks[jj2][half * DH + d];
            s += QuadReadAcrossX(s);  // the partner's half: both threads of the row run it together
            uint j = j0 + jj2;
            if (!live || (p.CAUSAL != 0 && j > i)) continue;  // masked after the shuffle, by both threads
            if (s > m) {
                float a = exp(m - s);
                l *= a;
                [unroll] for (uint d = 0; d < DH; ++d) acc[d] *= a;
                m = s;
            }
            float pj = exp(s - m);
            l += pj;
            [unroll] for (uint d = 0; d < DH; ++d) acc[d] += pj * Vs[jj2][half * DH + d];
        }
        GroupMemoryBarrierWithGroupSync();
    }
    if (!live) return;
    [unroll] for (uint d = 0; d < DH; ++d) {
        uint dd = half * DH + d;
        if (dd < p.D) o[(head * p.S + i) * p.D + dd] = acc[d] / l;
    }
}
