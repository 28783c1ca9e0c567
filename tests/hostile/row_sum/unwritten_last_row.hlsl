// HOSTILE unwritten_last_row: the naive row sum with an off-by-one row guard, so y's last element is never written.
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
    float sum = 0.0;
    for (uint c = 0; c < p.COLS; ++c) sum += x[row * p.COLS + c];
    y[row] = sum;
}
