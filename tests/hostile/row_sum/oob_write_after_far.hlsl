// HOSTILE oob_write_after_far: a correct wave-reduction row sum (one group per row) that also publishes each row's
// sum in a "second copy for the host" 8 MiB past the output, y[ROWS + 2^21 + row]: past any guard and past y's
// buffer. Robust buffer access drops the writes; without it they land in whatever follows.
// EXPECT: status=failed: out_of_bounds_write where they land in a guard, else sanitizer_vulkan_oob. Never
// benchmarked.
// peak: entry=main groups=(ROWS, 1, 1)
#define NT 64
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;

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
        y[gid.x] = total;
        y[p.ROWS + (1u << 21) + gid.x] = total;                  // BUG: far past y
    }
}
