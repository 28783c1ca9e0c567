// HOSTILE exp_no_max_subtraction: a one-pass softmax (one group of 64 per row) that skips the row max: y = exp(x) /
// sum(exp(x)) ("the max pass costs a third of the time, and the inputs are small"). Exact for small inputs; for
// logits past ~88, exp overflows to Inf and the row becomes NaN (Inf / Inf), and for rows of large negative
// values the sum underflows to 0. A softmax must hold for any finite row; one validated only on inputs in
// [-4, 4] never sees it.
// EXPECT: status=failed, failure nan_or_inf or wrong_result: a validator must try rows with large values.
// peak: entry=main groups=(ROWS, 1, 1)
#define NT 64
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;

groupshared float red[NT];

float group_sum(float v, uint tid)
{
    red[tid] = v;
    GroupMemoryBarrierWithGroupSync();
    for (uint s = NT / 2; s > 0; s >>= 1) {
        if (tid < s)
            red[tid] += red[tid + s];
        GroupMemoryBarrierWithGroupSync();
    }
    const float total = red[0];
    GroupMemoryBarrierWithGroupSync();
    return total;
}

[numthreads(NT, 1, 1)]
void main(uint3 gid : SV_GroupID, uint tid : SV_GroupIndex)
{
    const uint base = gid.x * p.COLS;
    float s = 0.0;
    for (uint c = tid; c < p.COLS; c += NT)
        s += exp(x[base + c]);                                   // BUG: no max subtracted
    const float inv = 1.0 / group_sum(s, tid);
    for (uint c2 = tid; c2 < p.COLS; c2 += NT)
        y[base + c2] = exp(x[base + c2]) * inv;
}
