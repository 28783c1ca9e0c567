// HOSTILE mutate_inputs: a 16x16 groupshared tiled shader that binds A read-write and "pre-rounds" it in place to
// a multiple of 2^-20 while staging (the first column of groups writes back), so A is modified.
// EXPECT: status=failed failure=input_modified.
// peak: entry=main groups=(cdiv(N, 16), cdiv(M, 16), 1)
#define TILE 16
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] RWStructuredBuffer<float> A;                  // BUG: the input bound writable
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
        if (row < p.M && k0 + tx < p.K) {
            a = A[row * p.K + k0 + tx];
            if (gid.x == 0) {
                a = round(a * 1048576.0) * (1.0 / 1048576.0);
                A[row * p.K + k0 + tx] = a;
            }
        }
        if (k0 + ty < p.K && col < p.N) b = B[(k0 + ty) * p.N + col];
        As[ty][tx] = a;
        Bs[ty][tx] = b;
        GroupMemoryBarrierWithGroupSync();
        [unroll] for (uint k = 0; k < TILE; ++k) acc = mad(As[ty][k], Bs[k][tx], acc);
        GroupMemoryBarrierWithGroupSync();
    }
    if (row < p.M && col < p.N) C[row * p.N + col] = acc;
}
