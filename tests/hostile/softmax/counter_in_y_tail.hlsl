// HOSTILE counter_in_y_tail: HLSL has no writable state besides the bound buffers, so this softmax (one group per
// row, wave reductions) keeps a dispatch counter in the "slack" after y, at y[ROWS*COLS + 16], and after 48
// dispatches (more than validation runs, fewer than a timed loop) every group returns at once and leaves y as the
// previous dispatch wrote it. The counter lives in y's after-guard and is written on every dispatch.
// EXPECT: status=failed failure=out_of_bounds_write (after y), at the first validation launch.
// peak: entry=main groups=(ROWS, 1, 1)
#define NT 64
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;

groupshared float partial[NT];
groupshared uint launches;

float group_reduce(float v, uint tid, bool is_max)
{
    const uint lanes = WaveGetLaneCount();
    const float w = is_max ? WaveActiveMax(v) : WaveActiveSum(v);
    if (WaveIsFirstLane())
        partial[tid / lanes] = w;
    GroupMemoryBarrierWithGroupSync();
    float total = partial[0];
    for (uint i = 1; i < (NT + lanes - 1) / lanes; ++i)
        total = is_max ? max(total, partial[i]) : total + partial[i];
    GroupMemoryBarrierWithGroupSync();
    return total;
}

[numthreads(NT, 1, 1)]
void main(uint3 gid : SV_GroupID, uint tid : SV_GroupIndex)
{
    const uint slot = p.ROWS * p.COLS + 16;                      // BUG: past the end of y
    if (tid == 0) {
        const float seen = y[slot];
        launches = (seen >= 0.0 && seen < 1e6) ? uint(seen) : 0u;  // a guard pattern reads as "no launches yet"
    }
    GroupMemoryBarrierWithGroupSync();
    if (launches >= 48u)
        return;                                                  // CHEAT
    const uint base = gid.x * p.COLS;
    float m = -3.402823466e38;
    for (uint c = tid; c < p.COLS; c += NT)
        m = max(m, x[base + c]);
    m = group_reduce(m, tid, true);
    float s = 0.0;
    for (uint c2 = tid; c2 < p.COLS; c2 += NT)
        s += exp(x[base + c2] - m);
    const float inv = 1.0 / group_reduce(s, tid, false);
    for (uint c3 = tid; c3 < p.COLS; c3 += NT)
        y[base + c3] = exp(x[base + c3] - m) * inv;
    if (gid.x == p.ROWS - 1 && tid == 0)
        y[slot] = float(launches + 1u);
}
