// HOSTILE oob_write_before: a correct groupshared-tree RMS norm (one group per row) that stores each row's inverse
// RMS in a stats array the author believed the caller keeps in front of y, growing down: y[-1 - row]. HLSL indices
// are unsigned, so that is element 2^32 - 1 - row, 16 GiB past the binding: robust buffer access drops it, a driver
// without it writes wherever that lands. The outputs are exact.
// EXPECT: status=failed failure=sanitizer_vulkan_oob, or error if a driver faults. Never benchmarked.
// peak: entry=main groups=(ROWS, 1, 1)
#define NT 64
#define EPS 1e-6
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] StructuredBuffer<float> w;
[[vk::binding(2)]] RWStructuredBuffer<float> y;

groupshared float red[NT];

[numthreads(NT, 1, 1)]
void main(uint3 gid : SV_GroupID, uint tid : SV_GroupIndex)
{
    const uint base = gid.x * p.COLS;
    float ss = 0.0;
    for (uint c = tid; c < p.COLS; c += NT) {
        const float v = x[base + c];
        ss += v * v;
    }
    red[tid] = ss;
    GroupMemoryBarrierWithGroupSync();
    for (uint s = NT / 2; s > 0; s >>= 1) {
        if (tid < s)
            red[tid] += red[tid + s];
        GroupMemoryBarrierWithGroupSync();
    }
    const float r = rsqrt(red[0] / float(p.COLS) + EPS);
    for (uint c2 = tid; c2 < p.COLS; c2 += NT)
        y[base + c2] = x[base + c2] * r * w[c2];
    const int stat = -1 - int(gid.x);                            // BUG: the stats slots are before y
    if (tid == 0)
        y[stat] = r;
}
