// HOSTILE half_accumulate: the naive row sum kept in half: an 11-bit accumulator for a sum the ABI returns in f32.
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
    half sum = 0.0h;                                             // BUG: 11-bit accumulator
    for (uint c = 0; c < p.COLS; ++c) sum += half(x[row * p.COLS + c]);
    y[row] = float(sum);
}
