// HOSTILE oob_read_padding: the naive convolution without the padding test: a tap above, left of, right of or below the image reads whatever lies there (the previous row, the previous image, or before x itself).
// EXPECT: status=failed failure=out_of_bounds_read|wrong_result.
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
        // BUG: no test that the row is inside the image
        for (uint s = 0; s < p.S; ++s) {
            int v = (int)(oq * p.STRIDE + s * p.DIL) - (int)p.PAD;
            // BUG: nor the column
            int xb = (((int)n * (int)p.H + h) * (int)p.W + v) * (int)p.C;
            uint f = ((k * p.R + r) * p.S + s) * p.C;
            for (uint c = 0; c < p.C; ++c)
                acc += x[xb + c] * w[f + c];
        }
    }
    y[i] = acc;
}
