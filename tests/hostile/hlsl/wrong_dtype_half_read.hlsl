// HOSTILE wrong_dtype_half_read: a shader written for an f16 session (A and B bound as StructuredBuffer<half>)
// submitted to an f32 session: it multiplies the halves of f32 bit patterns.
// EXPECT: status=failed, failure wrong_result or nan_or_inf (a device without 16-bit storage refuses it: then
// status=error is also accepted).
// peak: entry=main groups=(cdiv(N, 16), cdiv(M, 16), 1)
#define TILE 16
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<half> A;                     // BUG: the session is f32
[[vk::binding(1)]] StructuredBuffer<half> B;
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
        if (row < p.M && k0 + tx < p.K) a = float(A[row * p.K + k0 + tx]);
        if (k0 + ty < p.K && col < p.N) b = float(B[(k0 + ty) * p.N + col]);
        As[ty][tx] = a;
        Bs[ty][tx] = b;
        GroupMemoryBarrierWithGroupSync();
        [unroll] for (uint k = 0; k < TILE; ++k) acc = mad(As[ty][k], Bs[k][tx], acc);
        GroupMemoryBarrierWithGroupSync();
    }
    if (row < p.M && col < p.N) C[row * p.N + col] = acc;
}
