// HOSTILE mutate_input: the naive RMS norm that binds w read-write and folds the row's scale into it in place for
// the first row ("one product less per element"), so the input w is modified.
// EXPECT: status=failed failure=input_modified.
// peak: entry=main groups=(cdiv(ROWS, 64), 1, 1)
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> w;                 // BUG: the input bound writable
[[vk::binding(2)]] RWStructuredBuffer<float> y;

[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID)
{
    uint row = id.x;
    if (row >= p.ROWS) return;
    uint base = row * p.COLS;
    float ss = 0.0;
    for (uint c = 0; c < p.COLS; ++c) ss += x[base + c] * x[base + c];
    float r = rsqrt(ss / float(p.COLS) + 1e-6);
    for (uint c2 = 0; c2 < p.COLS; ++c2) {
        y[base + c2] = x[base + c2] * r * w[c2];
        if (row == 0) w[c2] = w[c2] * 0.5;
    }
}
