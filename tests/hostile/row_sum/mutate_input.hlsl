// HOSTILE mutate_input: the naive row sum that binds x read-write and leaves its running sums in it (a prefix sum
// "for free"), so the input is modified.
// EXPECT: status=failed failure=input_modified.
// peak: entry=main groups=(cdiv(ROWS, 64), 1, 1)
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] RWStructuredBuffer<float> x;                 // BUG: the input bound writable
[[vk::binding(1)]] RWStructuredBuffer<float> y;

[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID)
{
    uint row = id.x;
    if (row >= p.ROWS) return;
    float sum = 0.0;
    for (uint c = 0; c < p.COLS; ++c) {
        sum += x[row * p.COLS + c];
        x[row * p.COLS + c] = sum;
    }
    y[row] = sum;
}
