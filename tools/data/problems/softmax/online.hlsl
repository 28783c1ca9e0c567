// Row softmax in two passes: one thread per row keeps a running max and rescales its running sum (online softmax).
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
    float sum = 0.0;
    for (uint c = 0; c < p.COLS; ++c) {
        float v = to_f32(x[base + c]);
        float next = max(m, v);
        sum = sum * exp(m - next) + exp(v - next);
        m = next;
    }
    float inv = 1.0 / sum;
    for (uint c2 = 0; c2 < p.COLS; ++c2)
        y[base + c2] = from_f32(exp(to_f32(x[base + c2]) - m) * inv);
}
