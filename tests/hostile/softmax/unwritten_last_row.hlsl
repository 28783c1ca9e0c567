// HOSTILE unwritten_last_row: the naive row softmax with an off-by-one row guard, so the last row is never written.
// EXPECT: status=failed failure=unwritten_output.
// peak: entry=main groups=(cdiv(ROWS, 64), 1, 1)
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;

[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID)
{
    uint row = id.x;
    if (row + 1 >= p.ROWS) return;                               // BUG: skips row ROWS - 1
    uint base = row * p.COLS;
    float m = -3.402823466e38;
    for (uint c = 0; c < p.COLS; ++c) m = max(m, x[base + c]);
    float sum = 0.0;
    for (uint c2 = 0; c2 < p.COLS; ++c2) sum += exp(x[base + c2] - m);
    for (uint c3 = 0; c3 < p.COLS; ++c3) y[base + c3] = exp(x[base + c3] - m) / sum;
}
