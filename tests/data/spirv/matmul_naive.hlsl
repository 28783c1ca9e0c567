// Three storage buffers in set 0, a 12-byte push-constant block, numthreads(16, 16, 1), no groupshared memory.
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> A;
[[vk::binding(1)]] StructuredBuffer<float> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;

[numthreads(16, 16, 1)]
void main(uint3 id : SV_DispatchThreadID)
{
    uint row = id.y, col = id.x;
    if (row >= p.M || col >= p.N) return;
    float acc = 0.0;
    for (uint k = 0; k < p.K; ++k) acc += A[row * p.K + k] * B[k * p.N + col];
    C[row * p.N + col] = acc;
}
