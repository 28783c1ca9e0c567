// HOSTILE hang_unsigned_k: a 16x16 groupshared tiled shader that walks the K tiles backwards. The tile index is
// uint, so `k0 >= 0` is always true: after tile 0 it wraps to ~4e9, every load is masked to zero by the edge
// guards, and the loop (with its group barriers) never ends.
// EXPECT: status=error failure=timeout; the worker is replaced and the next good shader benchmarks.
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
    uint last = (p.K - 1) / TILE * TILE;
    [loop] for (uint k0 = last; k0 >= 0; k0 -= TILE) {      // BUG: uint is never negative
        float a = 0.0, b = 0.0;
        if (row < p.M && k0 + tx < p.K) a = A[row * p.K + k0 + tx];
        if (k0 + ty < p.K && col < p.N) b = B[(k0 + ty) * p.N + col];
        As[ty][tx] = a;
        Bs[ty][tx] = b;
        GroupMemoryBarrierWithGroupSync();
        [unroll] for (uint k = 0; k < TILE; ++k) acc = mad(As[ty][k], Bs[k][tx], acc);
        GroupMemoryBarrierWithGroupSync();
        if (row < p.M && col < p.N) C[row * p.N + col] = acc;  // running partial (a debugging aid)
    }
}
