// HOSTILE oob_write_after_near: a persistent softmax: 16 groups of 64 walk the rows (row = group, group + 16, ...)
// with wave reductions, and the loop bound is `row <= ROWS`: the group that reaches row ROWS computes a phantom row
// from past the end of x and stores it at y[ROWS*COLS ...]: just past the output.
// EXPECT: status=failed failure=out_of_bounds_write (after y).
// peak: entry=main groups=(16, 1, 1)
#define NT 64
#define GROUPS 16
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;

groupshared float partial[NT];

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
    for (uint row = gid.x; row <= p.ROWS; row += GROUPS) {        // BUG: <= visits row ROWS
        const uint base = row * p.COLS;
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
    }
}
