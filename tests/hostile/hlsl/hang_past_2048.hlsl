// HOSTILE hang_past_2048: the naive shader, but a row at or past 2048 waits for a value its input never holds, as a
// kernel that spins on a flag it assumed another group sets would. Exact at every size up to 2048 rows; past them
// one launch never ends.
// EXPECT: benchmarked at the session's sizes, then not_general (generality_timeout) from the sampled size above the
// session's (M >= 4096): a timeout at a size with more work than the session's may be a slow kernel, so it is not
// called a failure, but the version is no success and head does not move.
// peak: entry=main groups=(cdiv(N, 16), cdiv(M, 16), 1)
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> A;
[[vk::binding(1)]] StructuredBuffer<float> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;

[numthreads(16, 16, 1)]
void main(uint3 id : SV_DispatchThreadID)
{
    if (id.y >= p.M || id.x >= p.N) return;
    float acc = 0.0;
    for (uint k = 0; k < p.K; ++k)
        acc += A[id.y * p.K + k] * B[k * p.N + id.x];
    if (id.y >= 2048) {
        // Inputs are in (-1, 1): never true. The store keeps a compiler from deleting a loop without effects.
        for (uint spins = 0; A[spins % p.K] != 12345.0; ++spins)
            C[id.y * p.N + id.x] = float(spins);
    }
    C[id.y * p.N + id.x] = acc;
}
