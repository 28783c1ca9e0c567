// Naive RMS norm: one thread per row; the sum of squares, then each element times rsqrt(mean + 1e-6) times w.
// peak: entry=main groups=(cdiv(ROWS, 64), 1, 1)
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<T> x;
[[vk::binding(1)]] StructuredBuffer<T> w;
[[vk::binding(2)]] RWStructuredBuffer<T> y;

[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID)
{
    uint row = id.x;
    if (row >= p.ROWS) return;
    uint base = row * p.COLS;
    float ss = 0.0;
    for (uint c = 0; c < p.COLS; ++c) {
        float v = to_f32(x[base + c]);
        ss += v * v;
    }
    float r = rsqrt(ss / float(p.COLS) + 1e-6);
    for (uint c = 0; c < p.COLS; ++c)
        y[base + c] = from_f32(to_f32(x[base + c]) * r * to_f32(w[c]));
}
