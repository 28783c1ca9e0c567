// Naive attention written by the agent from list_problems' ABI: one thread per query row (b, h, i).
// Pass 1: the row's max score m and sum l of exp(s - m); pass 2: o = sum_j exp(s_j - m) / l * v_j, added into o
// (zeroed first) so that any D fits without a register array. CAUSAL = 1 limits keys to j <= i.
// peak: entry=main groups=(cdiv(B * H * S, 64), 1, 1)
struct Params { uint B; uint H; uint S; uint D; uint CAUSAL; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> q;
[[vk::binding(1)]] StructuredBuffer<float> k;
[[vk::binding(2)]] StructuredBuffer<float> v;
[[vk::binding(3)]] RWStructuredBuffer<float> o;

float score(uint qb, uint kb) {
    float s = 0.0;
    for (uint d = 0; d < p.D; ++d) s += q[qb + d] * k[kb + d];
    return s;
}

[numthreads(64, 1, 1)]
void main(uint3 tid : SV_DispatchThreadID) {
    uint row = tid.x;  // (b*H + h)*S + i
    if (row >= p.B * p.H * p.S) return;
    uint i = row % p.S, head = row / p.S;
    uint qb = row * p.D, kv = head * p.S * p.D;
    uint last = p.CAUSAL != 0 ? i + 1 : p.S;
    float scale = 1.0 / sqrt(float(p.D));
    float m = -3.402823e38, l = 0.0;
    for (uint j = 0; j < last; ++j) {
        float s = score(qb, kv + j * p.D) * scale;
        float mn = max(m, s);
        l = l * exp(m - mn) + exp(s - mn);
        m = mn;
    }
    for (uint d = 0; d < p.D; ++d) o[qb + d] = 0.0;
    for (uint j2 = 0; j2 < last; ++j2) {
        float pj = exp(score(qb, kv + j2 * p.D) * scale - m) / l;
        for (uint d2 = 0; d2 < p.D; ++d2) o[qb + d2] += pj * v[kv + j2 * p.D + d2];
    }
}
