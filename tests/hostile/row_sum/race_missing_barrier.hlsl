// HOSTILE race_missing_barrier: the wave-reduction row sum (one group of 64 per row): WaveActiveSum in each wave, the
// first lane of each wave leaves its sum in groupshared memory, and thread 0 adds them, with no barrier in between
// ("WaveActiveSum already waited for everyone": it waits for the wave, not for the group). Thread 0 can add the
// other waves' slots before they are written: what the previous row's group left there, or nothing at all.
// EXPECT: status=failed, failure wrong_result, nondeterministic or nan_or_inf.
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
    // BUG: no GroupMemoryBarrierWithGroupSync() here
    if (tid == 0) {
        float total = partial[0];
        for (uint i = 1; i < (NT + lanes - 1) / lanes; ++i)
            total += partial[i];
        y[gid.x] = total;
    }
}
