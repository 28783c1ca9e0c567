// Naive conv2d written by the agent from list_problems' ABI: one thread per output y[n, p, q, k] (NHWC x, KRSC w).
// peak: entry=main groups=(cdiv(N * ((H + 2 * PAD - DIL * (R - 1) - 1) // STRIDE + 1) * ((W + 2 * PAD - DIL * (S - 1) - 1) // STRIDE + 1) * K, 64), 1, 1)
struct Params { uint N; uint H; uint W; uint C; uint K; uint R; uint S; uint STRIDE; uint PAD; uint DIL; uint P; uint Q; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] StructuredBuffer<float> w;
[[vk::binding(2)]] RWStructuredBuffer<float> y;

[numthreads(64, 1, 1)]
void main(uint3 tid : SV_DispatchThreadID) {
    uint idx = tid.x;
    if (idx >= p.N * p.P * p.Q * p.K) return;
    uint k = idx % p.K;
    uint q = (idx / p.K) % p.Q;
    uint pp = (idx / (p.K * p.Q)) % p.P;
    uint n = idx / (p.K * p.Q * p.P);
    float acc = 0.0;
    for (uint r = 0; r < p.R; ++r) {
        int h = int(pp * p.STRIDE + r * p.DIL) - int(p.PAD);
        if (h < 0 || h >= int(p.H)) continue;
        for (uint s = 0; s < p.S; ++s) {
            int ww = int(q * p.STRIDE + s * p.DIL) - int(p.PAD);
            if (ww < 0 || ww >= int(p.W)) continue;
            uint xb = ((n * p.H + uint(h)) * p.W + uint(ww)) * p.C;
            uint wb = ((k * p.R + r) * p.S + s) * p.C;
            for (uint c = 0; c < p.C; ++c) acc += x[xb + c] * w[wb + c];
        }
    }
    y[idx] = acc;
}
