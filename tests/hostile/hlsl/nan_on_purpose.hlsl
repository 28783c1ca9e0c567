// HOSTILE nan_on_purpose: a correct 16x16 groupshared tiled shader with a "log-scaled diagonal" epilogue: log()
// of every diagonal element (NaN where it is negative) and an outright NaN at element 0 from a bad mask constant.
// EXPECT: status=failed failure=nan_or_inf (the NaN is the shader's own, not an out-of-bounds read).
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
    float acc = 0.0;
    for (uint k0 = 0; k0 < p.K; k0 += TILE) {
        float a = 0.0, b = 0.0;
        if (row < p.M && k0 + tx < p.K) a = A[row * p.K + k0 + tx];
        if (k0 + ty < p.K && col < p.N) b = B[(k0 + ty) * p.N + col];
        As[ty][tx] = a;
        Bs[ty][tx] = b;
        GroupMemoryBarrierWithGroupSync();
        [unroll] for (uint k = 0; k < TILE; ++k) acc = mad(As[ty][k], Bs[k][tx], acc);
        GroupMemoryBarrierWithGroupSync();
    }
    if (row == col) acc = log(acc);                             // BUG: NaN for negative values
    if (row == 0 && col == 0) acc = asfloat(0x7fc00000u);       // and one quiet NaN for sure
    if (row < p.M && col < p.N) C[row * p.N + col] = acc;
}
