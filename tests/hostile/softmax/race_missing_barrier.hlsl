// HOSTILE race_missing_barrier: the groupshared-tree softmax (one group of 64 per row, as examples/softmax/hlsl/
// 1_groupshared.hlsl) with the barriers inside the tree loops taken out ("the tree only shrinks, each thread reads
// slots nobody writes in the same step"): not so, step s reads red[tid + s], which thread tid + s wrote in the step
// before. A thread that runs ahead of the others reads partial or stale sums; the row max and sum depend on
// scheduling. On lavapipe a group's subgroups run one after another between barriers, so it is wrong every time.
// EXPECT: status=failed, failure wrong_result, nondeterministic or nan_or_inf.
// peak: entry=main groups=(ROWS, 1, 1)
#define NT 64
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;

groupshared float red[NT];

float group_reduce(float v, uint tid, bool is_max)
{
    red[tid] = v;
    GroupMemoryBarrierWithGroupSync();
    for (uint s = NT / 2; s > 0; s >>= 1) {
        if (tid < s)
            red[tid] = is_max ? max(red[tid], red[tid + s]) : red[tid] + red[tid + s];
        // BUG: no GroupMemoryBarrierWithGroupSync() between the steps
    }
    GroupMemoryBarrierWithGroupSync();
    const float total = red[0];
    GroupMemoryBarrierWithGroupSync();
    return total;
}

[numthreads(NT, 1, 1)]
void main(uint3 gid : SV_GroupID, uint tid : SV_GroupIndex)
{
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
}
