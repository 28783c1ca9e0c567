// HOSTILE oob_read_past_row: the naive row sum running to c <= COLS: every row adds the first element of the next,
// and the last row reads past the end of x.
// EXPECT: status=failed failure=out_of_bounds_read.
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
    float sum = 0.0;
    for (uint c = 0; c <= p.COLS; ++c) sum += x[row * p.COLS + c];   // BUG: one past the row
    y[row] = sum;
}
