// HOSTILE reads_c_before_write: a 16x16 groupshared tiled shader that accumulates straight into C (C += partial
// per K tile) assuming C starts zeroed, which nothing promises. With a poisoned C the result is NaN.
// EXPECT: status=failed failure=nan_or_inf.
// peak: entry=main groups=(cdiv(N, 16), cdiv(M, 16), 1)
#define TILE 16
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> A;
[[vk::binding(1)]] StructuredBuffer<float> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;

groupshared float As[TILE][TILE];
groupshared float Bs[TILE][TILE + 1];

[numthreads(TILE, TILE, 1)]
void main(uint3 gtid : SV_GroupThreadID, uint3 gid : SV_GroupID)
{
    uint tx = gtid.x, ty = gtid.y;
    uint row = gid.y * TILE + ty, col = gid.x * TILE + tx;
    for (uint k0 = 0; k0 < p.K; k0 += TILE) {
        float a = 0.0, b = 0.0;
        if (row < p.M && k0 + tx < p.K) a = A[row * p.K + k0 + tx];
        if (k0 + ty < p.K && col < p.N) b = B[(k0 + ty) * p.N + col];
        As[ty][tx] = a;
        Bs[ty][tx] = b;
        GroupMemoryBarrierWithGroupSync();
        float part = 0.0;
        [unroll] for (uint k = 0; k < TILE; ++k) part = mad(As[ty][k], Bs[k][tx], part);
        if (row < p.M && col < p.N) C[row * p.N + col] += part;  // BUG: reads C before anything wrote it
        GroupMemoryBarrierWithGroupSync();
    }
}
