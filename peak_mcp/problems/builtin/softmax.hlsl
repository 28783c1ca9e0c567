// Naive row softmax: one thread per row, three passes over the row (max, sum of exp, normalized write).
// peak: entry=main groups=(cdiv(ROWS, 64), 1, 1)
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<T> x;
[[vk::binding(1)]] RWStructuredBuffer<T> y;

[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID)
{
    uint row = id.x;
    if (row >= p.ROWS) return;
    uint base = row * p.COLS;
    float m = -3.402823466e38;
    for (uint c = 0; c < p.COLS; ++c)
        m = max(m, to_f32(x[base + c]));
    float sum = 0.0;
    for (uint c = 0; c < p.COLS; ++c)
        sum += exp(to_f32(x[base + c]) - m);
    for (uint c = 0; c < p.COLS; ++c)
        y[base + c] = from_f32(exp(to_f32(x[base + c]) - m) / sum);
}
