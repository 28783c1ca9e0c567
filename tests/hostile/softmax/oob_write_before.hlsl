// HOSTILE oob_write_before: a correct groupshared softmax (one group per row) that stores each row's log-sum-exp
// "for the backward pass" in a stats array the author believed the caller keeps in front of y, growing down:
// y[-1 - row]. In HLSL's unsigned indexing that is element 2^32 - 1 - row, 16 GiB past the binding (a Vulkan shader
// cannot address memory before its binding's offset): robust buffer access drops the write, a driver without it
// writes wherever that lands. The outputs are exact.
// EXPECT: status=failed failure=sanitizer_vulkan_oob (GPU-assisted validation checks every access against the
// buffer's exact size), or error if a driver faults. Never benchmarked.
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
    float m = -3.402823466e38;
    for (uint c = tid; c < p.COLS; c += NT)
        m = max(m, x[base + c]);
    m = group_reduce(m, tid, true);
    float s = 0.0;
    for (uint c2 = tid; c2 < p.COLS; c2 += NT)
        s += exp(x[base + c2] - m);
    s = group_reduce(s, tid, false);
    const float inv = 1.0 / s;
    for (uint c3 = tid; c3 < p.COLS; c3 += NT)
        y[base + c3] = exp(x[base + c3] - m) * inv;
    const int stat = -1 - int(gid.x);                            // BUG: the stats slots are before y
    if (tid == 0)
        y[stat] = m + log(s);
}
