// A shader that never ends: the fence timeout or the worker's deadline must catch it.
// peak: entry=main groups=(64, 64, 1)
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> A;
[[vk::binding(1)]] StructuredBuffer<float> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;

[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID)
{
    uint i = 0;
    [loop] while (A[0] < 1e30) { i += 1; C[id.x % 64] = float(i); }
}
