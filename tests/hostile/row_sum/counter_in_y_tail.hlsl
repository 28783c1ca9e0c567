// HOSTILE counter_in_y_tail: a wave-reduction row sum (one group per row) that keeps a dispatch counter in the
// "slack" after y, at y[ROWS + 16]; after 48 dispatches every group returns at once and leaves y as it was. The
// counter lives in y's after-guard and is written on every dispatch.
// EXPECT: status=failed failure=out_of_bounds_write (after y), at the first validation launch.
// peak: entry=main groups=(ROWS, 1, 1)
#define NT 64
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;

groupshared float partial[NT];
groupshared uint launches;

[numthreads(NT, 1, 1)]
void main(uint3 gid : SV_GroupID, uint tid : SV_GroupIndex)
{
    const uint slot = p.ROWS + 16;                               // BUG: past the end of y
    if (tid == 0) {
        const float seen = y[slot];
        launches = (seen >= 0.0 && seen < 1e6) ? uint(seen) : 0u;
    }
    GroupMemoryBarrierWithGroupSync();
    if (launches >= 48u)
        return;                                                  // CHEAT
    const uint base = gid.x * p.COLS;
    float acc = 0.0;
    for (uint c = tid; c < p.COLS; c += NT)
        acc += x[base + c];
    const uint lanes = WaveGetLaneCount();
    const float wave_sum = WaveActiveSum(acc);
    if (WaveIsFirstLane())
        partial[tid / lanes] = wave_sum;
    GroupMemoryBarrierWithGroupSync();
    if (tid == 0) {
        float total = partial[0];
        for (uint i = 1; i < (NT + lanes - 1) / lanes; ++i)
            total += partial[i];
        y[gid.x] = total;
        if (gid.x == p.ROWS - 1)
            y[slot] = float(launches + 1u);
    }
}
