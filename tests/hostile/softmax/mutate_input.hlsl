// HOSTILE mutate_input: the naive row softmax that binds x read-write and stores the shifted values x - max back
// into it ("saves a subtraction in the last pass"), so the input is modified.
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
    uint base = row * p.COLS;
    float m = -3.402823466e38;
    for (uint c = 0; c < p.COLS; ++c) m = max(m, x[base + c]);
    float sum = 0.0;
    for (uint c2 = 0; c2 < p.COLS; ++c2) {
        x[base + c2] = x[base + c2] - m;
        sum += exp(x[base + c2]);
    }
    for (uint c3 = 0; c3 < p.COLS; ++c3) y[base + c3] = exp(x[base + c3]) / sum;
}
