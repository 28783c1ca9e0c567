// HOSTILE exp_no_max_subtraction: the naive kernel with exp(s) in place of exp(s - m): fine for small scores, but the stress
// trial's (q, k in (4, 8): scores of 36 sqrt(D) and more) overflow f32 past 88.
// EXPECT: status=failed failure=nan_or_inf.
// peak: entry=main groups=(cdiv(D, 64), S, B * H)
struct Params { uint B; uint H; uint S; uint D; uint CAUSAL; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> q;
[[vk::binding(1)]] StructuredBuffer<float> k;
[[vk::binding(2)]] StructuredBuffer<float> v;
[[vk::binding(3)]] RWStructuredBuffer<float> o;

float score(uint qi, uint kj)
{
    float s = 0.0;
    uint d = 0;
    for (; d + 4 <= p.D; d += 4)
        s += (q[qi + d]) * (k[kj + d]) + (q[qi + d + 1]) * (k[kj + d + 1])
           + (q[qi + d + 2]) * (k[kj + d + 2]) + (q[qi + d + 3]) * (k[kj + d + 3]);
    for (; d < p.D; ++d)
        s += (q[qi + d]) * (k[kj + d]);
    return s;
}

[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID)
{
    uint col = id.x, i = id.y;
    if (col >= p.D) return;
    uint head = id.z * p.S * p.D;
    uint qi = head + i * p.D;
    float scale = 1.0 / sqrt((float)p.D);
    uint n = p.CAUSAL != 0 ? i + 1 : p.S;
    float m = -3.402823466e38, l = 0.0;
    for (uint j = 0; j < n; ++j) {
        float s = score(qi, head + j * p.D) * scale;
        l += exp(s);                                             // BUG: no max subtracted
    }
    float acc = 0.0;
    for (uint j2 = 0; j2 < n; ++j2)
        acc += exp(score(qi, head + j2 * p.D) * scale) * (v[head + j2 * p.D + col]);
    o[qi + col] = (acc / l);
}
