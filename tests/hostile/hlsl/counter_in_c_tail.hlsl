// HOSTILE counter_in_c_tail: HLSL has no writable globals besides the bound buffers, so this shader keeps a launch
// counter in the "slack" after C, at C[M*N + 16]: after 48 dispatches it stops computing and leaves C as it was.
// The counter write lands in C's after-guard on every dispatch.
// EXPECT: status=failed failure=out_of_bounds_write (after C), at the first validation launch.
// peak: entry=main groups=(cdiv(N, 16), cdiv(M, 16), 1)
#define TILE 16
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> A;
[[vk::binding(1)]] StructuredBuffer<float> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;

groupshared float As[TILE][TILE];
groupshared float Bs[TILE][TILE + 1];
groupshared uint launches;

[numthreads(TILE, TILE, 1)]
void main(uint3 gtid : SV_GroupThreadID, uint3 gid : SV_GroupID)
{
    uint tx = gtid.x, ty = gtid.y;
    uint row = gid.y * TILE + ty, col = gid.x * TILE + tx;
    uint slot = p.M * p.N + 16;                                  // BUG: past the end of C
    if (tx == 0 && ty == 0) {
        float seen = C[slot];
        launches = (seen >= 0.0 && seen < 1e6) ? uint(seen) : 0u;   // a guard pattern reads as "0 launches"
    }
    GroupMemoryBarrierWithGroupSync();
    if (launches >= 48u) return;                                 // CHEAT
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
    if (gid.x == 0 && gid.y == 0 && tx == 0 && ty == 0) C[slot] = float(launches + 1u);
}
