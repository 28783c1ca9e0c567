// Naive convolution: one thread per output element y[n, p, q, k] (k fastest), summing C*R*S products in f32;
// taps outside the input (the padding) are skipped, as they read 0. The groups spread over y past 65,535 along x
// (every Vulkan device's limit): row y of groups starts at element y * 65535 * 64.
// peak: entry=main groups=(min(cdiv(N * P * Q * K, 64), 65535), cdiv(cdiv(N * P * Q * K, 64), 65535), 1)
struct Params { uint N; uint H; uint W; uint C; uint K; uint R; uint S; uint STRIDE; uint PAD; uint DIL; uint P; uint Q; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<T> x;
[[vk::binding(1)]] StructuredBuffer<T> w;
[[vk::binding(2)]] RWStructuredBuffer<T> y;

[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID)
{
    uint i = id.y * 65535u * 64u + id.x;
    if (i >= p.N * p.P * p.Q * p.K) return;
    uint k = i % p.K;
    uint pix = i / p.K;
    uint oq = pix % p.Q;
    uint op = (pix / p.Q) % p.P;
    uint n = pix / (p.P * p.Q);
    float acc = 0.0;
    for (uint r = 0; r < p.R; ++r) {
        int h = (int)(op * p.STRIDE + r * p.DIL) - (int)p.PAD;
        if (h < 0 || h >= (int)p.H) continue;
        for (uint s = 0; s < p.S; ++s) {
            int v = (int)(oq * p.STRIDE + s * p.DIL) - (int)p.PAD;
            if (v < 0 || v >= (int)p.W) continue;
            uint xb = ((n * p.H + (uint)h) * p.W + (uint)v) * p.C;
            uint f = ((k * p.R + r) * p.S + s) * p.C;
            for (uint c = 0; c < p.C; ++c)
                acc += to_f32(x[xb + c]) * to_f32(w[f + c]);
        }
    }
    y[i] = from_f32(acc);
}
