// Naive attention forward: one thread per output element o[b, h, i, d]. A first pass over the keys finds the
// row's max score m and l = sum exp(s - m) (online: l rescaled when m grows), a second sums exp(s - m) v[j, d];
// each thread recomputes the scores of its row (4 products per loop step: lavapipe stops a thread's loops after
// 65535 iterations in all). Scores are never stored; any D; CAUSAL=1 stops at key i.
// peak: entry=main groups=(cdiv(D, 64), S, B * H)
struct Params { uint B; uint H; uint S; uint D; uint CAUSAL; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<T> q;
[[vk::binding(1)]] StructuredBuffer<T> k;
[[vk::binding(2)]] StructuredBuffer<T> v;
[[vk::binding(3)]] RWStructuredBuffer<T> o;

float score(uint qi, uint kj)
{
    float s = 0.0;
    uint d = 0;
    for (; d + 4 <= p.D; d += 4)
        s += to_f32(q[qi + d]) * to_f32(k[kj + d]) + to_f32(q[qi + d + 1]) * to_f32(k[kj + d + 1])
           + to_f32(q[qi + d + 2]) * to_f32(k[kj + d + 2]) + to_f32(q[qi + d + 3]) * to_f32(k[kj + d + 3]);
    for (; d < p.D; ++d)
        s += to_f32(q[qi + d]) * to_f32(k[kj + d]);
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
        if (s > m) { l *= exp(m - s); m = s; }
        l += exp(s - m);
    }
    float acc = 0.0;
    for (uint j2 = 0; j2 < n; ++j2)
        acc += exp(score(qi, head + j2 * p.D) * scale - m) * to_f32(v[head + j2 * p.D + col]);
    o[qi + col] = from_f32(acc / l);
}
