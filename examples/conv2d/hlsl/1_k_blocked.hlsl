// Step 1 (HLSL), register blocking over filters: one thread per output pixel and KB consecutive filters, so each
// input element read feeds KB products; the tail of K is guarded. Any sizes: the groups spread over y past 65,535
// along x (every Vulkan device's limit).
// peak: entry=main groups=(min(cdiv(N * P * Q * cdiv(K, 4), 64), 65535), cdiv(cdiv(N * P * Q * cdiv(K, 4), 64), 65535), 1)
typedef float T;  // the session's dtype: float or half
float to_f32(T v) { return (float)v; }
T from_f32(float v) { return (T)v; }
#define KB 4
struct Params { uint N; uint H; uint W; uint C; uint K; uint R; uint S; uint STRIDE; uint PAD; uint DIL; uint P; uint Q; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<T> x;
[[vk::binding(1)]] StructuredBuffer<T> w;
[[vk::binding(2)]] RWStructuredBuffer<T> y;

[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID)
{
    uint kgroups = (p.K + KB - 1) / KB;
    uint i = id.y * 65535u * 64u + id.x;
    if (i >= p.N * p.P * p.Q * kgroups) return;
    uint k0 = (i % kgroups) * KB;
    uint pix = i / kgroups;
    uint oq = pix % p.Q;
    uint op = (pix / p.Q) % p.P;
    uint n = pix / (p.P * p.Q);
    float acc[KB];
    for (uint j = 0; j < KB; ++j) acc[j] = 0.0;
    for (uint r = 0; r < p.R; ++r) {
        int h = (int)(op * p.STRIDE + r * p.DIL) - (int)p.PAD;
        if (h < 0 || h >= (int)p.H) continue;
        for (uint s = 0; s < p.S; ++s) {
            int v = (int)(oq * p.STRIDE + s * p.DIL) - (int)p.PAD;
            if (v < 0 || v >= (int)p.W) continue;
            uint xb = ((n * p.H + (uint)h) * p.W + (uint)v) * p.C;
            for (uint c = 0; c < p.C; ++c) {
                float a = to_f32(x[xb + c]);
                for (uint j = 0; j < KB; ++j)
                    if (k0 + j < p.K) acc[j] += a * to_f32(w[(((k0 + j) * p.R + r) * p.S + s) * p.C + c]);
            }
        }
    }
    for (uint j = 0; j < KB; ++j)
        if (k0 + j < p.K) y[pix * p.K + k0 + j] = from_f32(acc[j]);
}
