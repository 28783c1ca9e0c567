// Naive matmul: one thread per element of C, no reuse of loaded data.
// peak: entry=main groups=(cdiv(N, 16), cdiv(M, 16), 1)
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
    for (uint k = 0; k < p.K; ++k)
        acc += float(A[row * p.K + k]) * float(B[k * p.N + col]);
    C[row * p.N + col] = acc;
}
