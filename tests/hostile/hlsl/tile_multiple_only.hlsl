// HOSTILE tile_multiple_only: a clean 32x32 groupshared tiled shader with 2 rows per thread (group 32x16) and NO
// edge handling: N/32 x M/32 groups (floor) and K/32 whole tiles, so it is exact when M, N and K are multiples of
// 32 and leaves the edges unwritten (and drops the K tail) otherwise.
// EXPECT at 128^3: benchmarked but generality.passed == false and head does not move.
// EXPECT at 100x77x53: status=failed failure=unwritten_output.
// peak: entry=main groups=(N // 32, M // 32, 1)
#define TILE 32
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> A;
[[vk::binding(1)]] StructuredBuffer<float> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;

groupshared float As[TILE][TILE];
groupshared float Bs[TILE][TILE + 1];

[numthreads(32, 16, 1)]
void main(uint3 gtid : SV_GroupThreadID, uint3 gid : SV_GroupID)
{
    uint tx = gtid.x, ty = gtid.y;
    uint row = gid.y * TILE + ty, col = gid.x * TILE + tx;
    float acc0 = 0.0, acc1 = 0.0;
    for (uint k0 = 0; k0 + TILE <= p.K; k0 += TILE) {
        As[ty][tx] = A[row * p.K + k0 + tx];
        As[ty + 16][tx] = A[(row + 16) * p.K + k0 + tx];
        Bs[ty][tx] = B[(k0 + ty) * p.N + col];
        Bs[ty + 16][tx] = B[(k0 + ty + 16) * p.N + col];
        GroupMemoryBarrierWithGroupSync();
        [unroll] for (uint k = 0; k < TILE; ++k) {
            float b = Bs[k][tx];
            acc0 = mad(As[ty][k], b, acc0);
            acc1 = mad(As[ty + 16][k], b, acc1);
        }
        GroupMemoryBarrierWithGroupSync();
    }
    C[row * p.N + col] = acc0;
    C[(row + 16) * p.N + col] = acc1;
}
