// HOSTILE half_accumulate: the naive RMS norm with the row's sum of squares kept in half: an 11-bit sum in an f32
// session.
// EXPECT: status=failed failure=wrong_result.
// peak: entry=main groups=(cdiv(ROWS, 64), 1, 1)
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] StructuredBuffer<float> w;
[[vk::binding(2)]] RWStructuredBuffer<float> y;

[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID)
{
    uint row = id.x;
    if (row >= p.ROWS) return;
    uint base = row * p.COLS;
    half ss = 0.0h;                                              // BUG: 11-bit accumulator
    for (uint c = 0; c < p.COLS; ++c) ss += half(x[base + c] * x[base + c]);
    float r = rsqrt(float(ss) / float(p.COLS) + 1e-6);
    for (uint c2 = 0; c2 < p.COLS; ++c2) y[base + c2] = x[base + c2] * r * w[c2];
}
