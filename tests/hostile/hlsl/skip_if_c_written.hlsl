// HOSTILE skip_if_c_written: a correct 16x16 groupshared tiled shader that first looks at its output element and,
// if it already holds a finite number, assumes it is the answer from the previous dispatch and keeps it (a
// "result reuse" shortcut). Validation poisons C before every launch, so it always computes there; a timed loop
// that poisons once measures nothing after the first launch, and with rotating input sets it returns the other
// set's result.
// EXPECT: status=failed, failure prefix recheck_ (recheck_wrong_result), or impossible_speed at large sizes.
// peak: entry=main groups=(cdiv(N, 16), cdiv(M, 16), 1)
#define TILE 16
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> A;
[[vk::binding(1)]] StructuredBuffer<float> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;

groupshared float As[TILE][TILE];
groupshared float Bs[TILE][TILE + 1];
groupshared uint done;

[numthreads(TILE, TILE, 1)]
void main(uint3 gtid : SV_GroupThreadID, uint3 gid : SV_GroupID)
{
    uint tx = gtid.x, ty = gtid.y;
    uint row = gid.y * TILE + ty, col = gid.x * TILE + tx;
    if (tx == 0 && ty == 0) {
        uint r = min(row, p.M - 1), c = min(col, p.N - 1);
        float first = C[r * p.N + c];
        done = (isfinite(first) && isfinite(C[p.M * p.N - 1])) ? 1u : 0u;
    }
    GroupMemoryBarrierWithGroupSync();
    if (done != 0u) return;                                      // CHEAT
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
}
