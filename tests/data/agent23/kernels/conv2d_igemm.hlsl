// conv-implicit-gemm: Y[m][k] = sum_g A[m][g] B[g][k], m = (n, p, q), g = (r, s, c) with c fastest.
// A 16x16 group covers 16 filters (x, contiguous in y's NPQK layout) by 16 output pixels (y).
// peak: entry=main groups=(cdiv(K, 16), cdiv(N * ((H + 2 * PAD - DIL * (R - 1) - 1) // STRIDE + 1) * ((W + 2 * PAD - DIL * (S - 1) - 1) // STRIDE + 1), 16), 1)
struct Params { uint N; uint H; uint W; uint C; uint K; uint R; uint S; uint STRIDE; uint PAD; uint DIL; uint P; uint Q; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] StructuredBuffer<float> w;
[[vk::binding(2)]] RWStructuredBuffer<float> y;

[numthreads(16, 16, 1)]
void main(uint3 tid : SV_DispatchThreadID) {
    uint k = tid.x, m = tid.y;
    if (k >= p.K || m >= p.N * p.P * p.Q) return;
    // (n, p, q) from m once, and the tap origin.
    uint q = m % p.Q, pq = m / p.Q;
    uint pr = pq % p.P, n = pq / p.P;
    int h0 = int(pr * p.STRIDE) - int(p.PAD), v0 = int(q * p.STRIDE) - int(p.PAD);
    uint G = p.R * p.S * p.C;
    uint wrow = k * G;  // B[g][k] = w[k*G + g]
    float acc = 0.0;
    for (uint r = 0; r < p.R; ++r) {
        int h = h0 + int(r * p.DIL);
        if (h < 0 || h >= int(p.H)) continue;  // the whole g-run of this row of taps is zero padding
        for (uint s = 0; s < p.S; ++s) {
            int v = v0 + int(s * p.DIL);
            if (v < 0 || v >= int(p.W)) continue;
            uint xb = ((n * p.H + uint(h)) * p.W + uint(v)) * p.C;
            uint wb = wrow + (r * p.S + s) * p.C;
            for (uint c = 0; c < p.C; ++c) acc += x[xb + c] * w[wb + c];
        }
    }
    y[m * p.K + k] = acc;
}
