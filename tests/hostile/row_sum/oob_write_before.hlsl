// HOSTILE oob_write_before: a correct wave-reduction row sum (one group per row) that also counts finished rows in a
// word it believes sits just before y, y[-1] (an atomic "rows done" counter for a follow-up pass). HLSL indices
// are unsigned, so that is element 2^32 - 1, 16 GiB past the binding: robust buffer access drops the atomic, a
// driver without it adds to whatever lies there. The outputs are exact.
// EXPECT: status=failed failure=sanitizer_vulkan_oob, or error if a driver faults. Never benchmarked.
// peak: entry=main groups=(ROWS, 1, 1)
#define NT 64
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<uint> y;                   // the same buffer, viewed as words for the atomic

groupshared float partial[NT];

[numthreads(NT, 1, 1)]
void main(uint3 gid : SV_GroupID, uint tid : SV_GroupIndex)
{
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
        y[gid.x] = asuint(total);
        const int done = -1;                                     // BUG: the counter is before y
        uint ignored;
        InterlockedAdd(y[done], 1u, ignored);
    }
}
