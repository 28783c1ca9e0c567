// HOSTILE padding_ignored: the naive convolution with each tap's row and column clamped into the image instead of skipped ("padding replicates the edge"): the border outputs sum edge pixels where zeros belong.
// EXPECT: status=failed failure=wrong_result.
// peak: entry=main groups=(cdiv(N * ((H + 2 * PAD - DIL * (R - 1) - 1) // STRIDE + 1) * ((W + 2 * PAD - DIL * (S - 1) - 1) // STRIDE + 1) * K, 64), 1, 1)
struct Params { uint N; uint H; uint W; uint C; uint K; uint R; uint S; uint STRIDE; uint PAD; uint DIL; uint P; uint Q; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] StructuredBuffer<float> w;
[[vk::binding(2)]] RWStructuredBuffer<float> y;

[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID)
{
    uint i = id.x;
    if (i >= p.N * p.P * p.Q * p.K) return;
    uint k = i % p.K;
    uint pix = i / p.K;
    uint oq = pix % p.Q;
    uint op = (pix / p.Q) % p.P;
    uint n = pix / (p.P * p.Q);
    float acc = 0.0;
    for (uint r = 0; r < p.R; ++r) {
        int h = (int)(op * p.STRIDE + r * p.DIL) - (int)p.PAD;
        h = clamp(h, 0, (int)p.H - 1);                   // BUG: clamps, reads the edge
        for (uint s = 0; s < p.S; ++s) {
            int v = (int)(oq * p.STRIDE + s * p.DIL) - (int)p.PAD;
            v = clamp(v, 0, (int)p.W - 1);               // BUG
            uint xb = ((n * p.H + (uint)h) * p.W + (uint)v) * p.C;
            uint f = ((k * p.R + r) * p.S + s) * p.C;
            for (uint c = 0; c < p.C; ++c)
                acc += x[xb + c] * w[f + c];
        }
    }
    y[i] = acc;
}
