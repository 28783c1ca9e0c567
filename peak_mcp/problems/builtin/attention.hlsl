// Naive attention forward: one thread per query row and chunk of 64 output columns o[b, h, i, c*64 .. c*64+63]. A
// first pass over the keys finds the row's max score m and l = sum exp(s - m) (online: l rescaled when m grows); a
// second computes each key's weight exp(s - m) once and adds weight * v[j, d] into the chunk's 64 accumulators.
// Scores are never stored and each is computed twice per chunk, so the work is about S^2 D^2 / 32, not the
// S^2 D^2 * 2 of a thread per output element (a launch at D = 4101 took 41 s on a 2-core lavapipe that way). Any D;
// CAUSAL=1 stops at key i. lavapipe stops a thread's loops after 65535 iterations in all: 4 products per step.
// peak: entry=main groups=(cdiv(S, 64), cdiv(D, 64), B * H)
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
    uint i = id.x, first = id.y * 64;
    if (i >= p.S) return;
    uint head = id.z * p.S * p.D;
    uint qi = head + i * p.D;
    uint cols = min(64u, p.D - first);
    float scale = 1.0 / sqrt((float)p.D);
    uint n = p.CAUSAL != 0 ? i + 1 : p.S;
    float m = -3.402823466e38, l = 0.0;
    for (uint j = 0; j < n; ++j) {
        float s = score(qi, head + j * p.D) * scale;
        if (s > m) { l *= exp(m - s); m = s; }
        l += exp(s - m);
    }
    float acc[64];
    for (uint c = 0; c < 64; ++c)
        acc[c] = 0.0;
    for (uint j2 = 0; j2 < n; ++j2) {
        uint kj = head + j2 * p.D;
        float w = exp(score(qi, kj) * scale - m);
        for (uint c2 = 0; c2 < cols; ++c2)
            acc[c2] += w * to_f32(v[kj + first + c2]);
    }
    for (uint c3 = 0; c3 < cols; ++c3)
        o[qi + first + c3] = from_f32(acc[c3] / l);
}
