// HOSTILE oob_write_after_far: a correct groupshared softmax (one group per row) that leaves a debug word, the last
// row's sum, at y[ROWS*COLS + 2^21]: 8 MiB past the output, past any guard and past the end of y's buffer. Vulkan
// drops a write outside the bound range only with robust buffer access; without it the write corrupts whatever
// lies there.
// EXPECT: status=failed: out_of_bounds_write where it lands in a guard, else sanitizer_vulkan_oob (GPU-assisted
// validation checks every access against the buffer's exact size). Never benchmarked.
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
    if (gid.x == p.ROWS - 1 && tid == 0)
        y[p.ROWS * p.COLS + (1u << 21)] = s;                     // BUG: far past y
}
