// HOSTILE half_accumulate: the naive row softmax with the row's sum of exponentials kept in half ("16-bit math is
// twice as fast"): an 11-bit sum in an f32 session.
// EXPECT: status=failed failure=wrong_result.
// peak: entry=main groups=(cdiv(ROWS, 64), 1, 1)
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;

[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID)
{
    uint row = id.x;
    if (row >= p.ROWS) return;
    uint base = row * p.COLS;
    float m = -3.402823466e38;
    for (uint c = 0; c < p.COLS; ++c) m = max(m, x[base + c]);
    half sum = 0.0h;                                             // BUG: 11-bit accumulator
    for (uint c2 = 0; c2 < p.COLS; ++c2) sum += half(exp(x[base + c2] - m));
    for (uint c3 = 0; c3 < p.COLS; ++c3) y[base + c3] = exp(x[base + c3] - m) / float(sum);
}
