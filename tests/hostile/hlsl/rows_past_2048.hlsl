// HOSTILE rows_past_2048: the naive shader with its (row, col) packed into one 32-bit word as 11 + 21 bits, as a
// kernel that assumed at most 2048 rows might: exact at every size up to 2048 rows, and rows 2048 and up land on
// row % 2048 (a stale re-write there) while their own rows stay unwritten.
// EXPECT at 128^3 and at 100x77x53: benchmarked but generality.passed == false (wrong at M above 2048) and head
// does not move.
// peak: entry=main groups=(cdiv(N, 16), cdiv(M, 16), 1)
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> A;
[[vk::binding(1)]] StructuredBuffer<float> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;

[numthreads(16, 16, 1)]
void main(uint3 id : SV_DispatchThreadID)
{
    if (id.y >= p.M || id.x >= p.N) return;
    uint packed = (id.y << 21) | id.x;
    uint row = packed >> 21, col = packed & 0x1FFFFF;
    float acc = 0.0;
    for (uint k = 0; k < p.K; ++k)
        acc += A[row * p.K + k] * B[k * p.N + col];
    C[row * p.N + col] = acc;
}
