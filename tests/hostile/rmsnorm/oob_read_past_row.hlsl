// HOSTILE oob_read_past_row: the naive RMS norm whose sum of squares runs to c <= COLS: every row adds one element
// of the next, and the last row reads past the end of x.
// EXPECT: status=failed failure=out_of_bounds_read.
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
    float ss = 0.0;
    for (uint c = 0; c <= p.COLS; ++c) ss += x[base + c] * x[base + c];   // BUG: one past the row
    float r = rsqrt(ss / float(p.COLS) + 1e-6);
    for (uint c2 = 0; c2 < p.COLS; ++c2) y[base + c2] = x[base + c2] * r * w[c2];
}
