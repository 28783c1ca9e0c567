// HOSTILE too_fast_fake: a "sampled" shader: the first and last row of groups (rows 0 and M-1 included, the ones a
// sampling checker always reads) are computed exactly with groupshared tiles; every other row gets a plausible
// estimate from every 16th k, scaled by 16. Dense, finite, right magnitude, ~16x too fast.
// EXPECT: status=failed failure=wrong_result (or impossible_speed).
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
    bool honest = gid.y == 0 || gid.y == (p.M + TILE - 1) / TILE - 1;
    float acc = 0.0;
    if (honest) {
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
    } else if (row < p.M && col < p.N) {
        for (uint k = 0; k < p.K; k += 16) acc = mad(A[row * p.K + k], B[k * p.N + col], acc);  // CHEAT
        acc *= 16.0;
    }
    if (row < p.M && col < p.N) C[row * p.N + col] = acc;
}
