// half buffers and half arithmetic (Float16, StorageBuffer16BitAccess), two float4[8][32] groupshared tiles
// (8 KiB) plus a uint counter (4 bytes), numthreads(256, 1, 1), a 5-word push-constant block.
struct Params { uint M; uint N; uint K; uint lda; uint ldb; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] ByteAddressBuffer A;
[[vk::binding(1)]] StructuredBuffer<half> B;
[[vk::binding(2)]] RWStructuredBuffer<half> C;
groupshared float4 tileA[8][32];
groupshared float4 tileB[8][32];
groupshared uint counter;

[numthreads(256, 1, 1)]
void main(uint3 gid : SV_GroupID, uint tid : SV_GroupIndex)
{
    if (tid == 0) counter = 0;
    tileA[tid / 32][tid % 32] = asfloat(A.Load4(16 * (gid.x * 256 + tid)));
    tileB[tid / 32][tid % 32] = float4(B[tid], B[tid + 1], B[tid + 2], B[tid + 3]);
    GroupMemoryBarrierWithGroupSync();
    InterlockedAdd(counter, 1);
    half acc = half(0.0);
    for (uint k = 0; k < 8; ++k) acc += half(dot(tileA[k][tid % 32], tileB[k][(tid + 1) % 32]));
    GroupMemoryBarrierWithGroupSync();
    C[gid.x * 256 + tid] = acc + half(float(counter + p.M + p.N + p.K + p.lda + p.ldb));
}
