// HOSTILE oob_write_after_far: a correct 16x16 groupshared tiled shader that keeps a debug "last group done" word
// at C[M*N + 300000], 1.2 MB past the output and past any guard, written by one thread of the last group.
// On Vulkan the write is outside the bound buffer range: with robust buffer access it is dropped, without it
// it corrupts other memory.
// EXPECT: status=failed failure=out_of_bounds_write where the write lands in a guard the validator sees; a
// driver that discards out-of-range writes (robustBufferAccess) makes it harmless: then benchmarked is also
// accepted. Either way the server stays up.
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
    if (row < p.M && col < p.N) C[row * p.N + col] = acc;
    if (tx == 0 && ty == 0 && gid.x == (p.N + TILE - 1) / TILE - 1 && gid.y == (p.M + TILE - 1) / TILE - 1)
        C[p.M * p.N + 300000] = float(gid.x + gid.y);              // BUG: far past C
}
