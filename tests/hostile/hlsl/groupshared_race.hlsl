// HOSTILE groupshared_race: a 32x32-tile shader with 4 rows per thread (group 32x8) whose barrier between staging
// the tiles and reading them was dropped; the Bs column a thread reads was staged by all 8 rows of threads, so it
// reads tiles other threads have not written yet (or the previous tile's values).
// EXPECT: status=failed, failure wrong_result or nondeterministic.
// peak: entry=main groups=(cdiv(N, 32), cdiv(M, 32), 1)
#define TILE 32
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> A;
[[vk::binding(1)]] StructuredBuffer<float> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;

groupshared float As[TILE][TILE];
groupshared float Bs[TILE][TILE + 1];

[numthreads(32, 8, 1)]
void main(uint3 gtid : SV_GroupThreadID, uint3 gid : SV_GroupID)
{
    uint tx = gtid.x, ty = gtid.y;
    uint row0 = gid.y * TILE + ty, col = gid.x * TILE + tx;
    float acc[4] = {0.0, 0.0, 0.0, 0.0};
    for (uint k0 = 0; k0 < p.K; k0 += TILE) {
        [unroll] for (uint i = 0; i < 4; ++i) {
            uint r = row0 + 8 * i, kb = k0 + ty + 8 * i;
            float a = 0.0, b = 0.0;
            if (r < p.M && k0 + tx < p.K) a = A[r * p.K + k0 + tx];
            if (kb < p.K && col < p.N) b = B[kb * p.N + col];
            As[ty + 8 * i][tx] = a;
            Bs[ty + 8 * i][tx] = b;
        }
        // BUG: missing GroupMemoryBarrierWithGroupSync() here
        [unroll] for (uint k = 0; k < TILE; ++k) {
            float b = Bs[k][tx];
            [unroll] for (uint i = 0; i < 4; ++i) acc[i] = mad(As[ty + 8 * i][k], b, acc[i]);
        }
        GroupMemoryBarrierWithGroupSync();
    }
    [unroll] for (uint i = 0; i < 4; ++i) {
        uint r = row0 + 8 * i;
        if (r < p.M && col < p.N) C[r * p.N + col] = acc[i];
    }
}
