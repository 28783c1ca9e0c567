// HOSTILE tile_multiple_only: a softmax with one group of 32 per row that walks the row in 32-column tiles, one
// column per thread and WaveActive reductions over the tile, with NO partial last tile: `c0 + 32 <= COLS`. Exact
// when COLS is a multiple of 32; otherwise the last COLS % 32 columns are left out of the max and the sum and are
// never written.
// EXPECT at 64x128: benchmarked, but generality.passed == false and head does not move.
// EXPECT at 64x100: status=failed failure=unwritten_output.
// peak: entry=main groups=(ROWS, 1, 1)
#define TILE 32
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;

groupshared float partial[TILE];

float group_reduce(float v, uint tid, bool is_max)
{
    const uint lanes = WaveGetLaneCount();
    const float w = is_max ? WaveActiveMax(v) : WaveActiveSum(v);
    if (WaveIsFirstLane())
        partial[tid / lanes] = w;
    GroupMemoryBarrierWithGroupSync();
    float total = partial[0];
    for (uint i = 1; i < (TILE + lanes - 1) / lanes; ++i)
        total = is_max ? max(total, partial[i]) : total + partial[i];
    GroupMemoryBarrierWithGroupSync();
    return total;
}

[numthreads(TILE, 1, 1)]
void main(uint3 gid : SV_GroupID, uint tid : SV_GroupIndex)
{
    const uint base = gid.x * p.COLS;
    float m = -3.402823466e38;
    for (uint c0 = 0; c0 + TILE <= p.COLS; c0 += TILE)          // BUG: whole tiles only
        m = max(m, x[base + c0 + tid]);
    m = group_reduce(m, tid, true);
    float s = 0.0;
    for (uint c1 = 0; c1 + TILE <= p.COLS; c1 += TILE)
        s += exp(x[base + c1 + tid] - m);
    const float inv = 1.0 / group_reduce(s, tid, false);
    for (uint c2 = 0; c2 + TILE <= p.COLS; c2 += TILE)
        y[base + c2 + tid] = exp(x[base + c2 + tid] - m) * inv;
}
