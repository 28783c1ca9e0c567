// HOSTILE tile_multiple_only: an RMS norm with four rows per group (group 32x4: each row of 32 threads reduces one
// row of the matrix in a groupshared tree of its own). The dispatch is ROWS / 4 groups,
// rounded down, and there is no row guard: exact when ROWS is a multiple of 4, the last ROWS % 4 rows never written
// otherwise (and no group at all below 4 rows).
// EXPECT at 64x128 and 64x100 (ROWS = 64 both times): benchmarked, but generality.passed == false and head does not
// move.
// peak: entry=main groups=(ROWS // 4, 1, 1)
#define RPG 4
#define EPS 1e-6
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] StructuredBuffer<float> w;
[[vk::binding(2)]] RWStructuredBuffer<float> y;

groupshared float red[RPG][32];

[numthreads(32, RPG, 1)]
void main(uint3 gid : SV_GroupID, uint3 t : SV_GroupThreadID)
{
    const uint row = gid.x * RPG + t.y;                          // BUG: rows past the last whole group are never
    const uint base = row * p.COLS;                              //      reached (no cdiv, no guard)
    float ss = 0.0;
    for (uint c = t.x; c < p.COLS; c += 32) {
        const float v = x[base + c];
        ss += v * v;
    }
    red[t.y][t.x] = ss;
    GroupMemoryBarrierWithGroupSync();
    for (uint s = 16; s > 0; s >>= 1) {
        if (t.x < s)
            red[t.y][t.x] += red[t.y][t.x + s];
        GroupMemoryBarrierWithGroupSync();
    }
    const float r = rsqrt(red[t.y][0] / float(p.COLS) + EPS);
    for (uint c2 = t.x; c2 < p.COLS; c2 += 32)
        y[base + c2] = x[base + c2] * r * w[c2];
}
