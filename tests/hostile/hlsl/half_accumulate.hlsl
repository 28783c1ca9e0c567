// HOSTILE half_accumulate: a 16x16 groupshared tiled shader that stages tiles as half and accumulates each dot
// product in half ("packed f16 math is twice as fast"). 11-bit sums: the error grows with K.
// EXPECT: status=failed failure=wrong_result. (A device without shaderFloat16 refuses it: status=error is then
// also accepted.)
// peak: entry=main groups=(cdiv(N, 16), cdiv(M, 16), 1)
#define TILE 16
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> A;
[[vk::binding(1)]] StructuredBuffer<float> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;

groupshared half As[TILE][TILE];
groupshared half Bs[TILE][TILE + 1];

[numthreads(TILE, TILE, 1)]
void main(uint3 gtid : SV_GroupThreadID, uint3 gid : SV_GroupID)
{
    uint tx = gtid.x, ty = gtid.y;
    uint row = gid.y * TILE + ty, col = gid.x * TILE + tx;
    half acc = 0.0h;                                             // BUG: 11-bit accumulator
    for (uint k0 = 0; k0 < p.K; k0 += TILE) {
        float a = 0.0, b = 0.0;
        if (row < p.M && k0 + tx < p.K) a = A[row * p.K + k0 + tx];
        if (k0 + ty < p.K && col < p.N) b = B[(k0 + ty) * p.N + col];
        As[ty][tx] = half(a);
        Bs[ty][tx] = half(b);
        GroupMemoryBarrierWithGroupSync();
        [unroll] for (uint k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
        GroupMemoryBarrierWithGroupSync();
    }
    if (row < p.M && col < p.N) C[row * p.N + col] = float(acc);
}
