// HOSTILE race_missing_barrier: the wave-reduction RMS norm (one group of 64 per row, as examples/rmsnorm/hlsl/
// 2_wave.hlsl): WaveActiveSum inside each wave, the first lane of each wave leaves its sum in groupshared memory,
// and every thread adds the waves' sums. The barrier between leaving the sums and reading them was dropped ("the
// partials are tiny"), so a wave that gets there first adds slots the other waves have not written yet: what the
// previous row or dispatch left there, or nothing at all.
// EXPECT: status=failed, failure wrong_result, nondeterministic or nan_or_inf.
// peak: entry=main groups=(ROWS, 1, 1)
#define NT 64
#define EPS 1e-6
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] StructuredBuffer<float> w;
[[vk::binding(2)]] RWStructuredBuffer<float> y;

groupshared float partial[NT];

[numthreads(NT, 1, 1)]
void main(uint3 gid : SV_GroupID, uint tid : SV_GroupIndex)
{
    const uint base = gid.x * p.COLS;
    float ss = 0.0;
    for (uint c = tid; c < p.COLS; c += NT) {
        const float v = x[base + c];
        ss += v * v;
    }
    const uint lanes = WaveGetLaneCount();
    const float wave_ss = WaveActiveSum(ss);
    if (WaveIsFirstLane())
        partial[tid / lanes] = wave_ss;
    // BUG: no GroupMemoryBarrierWithGroupSync() here
    float total = partial[0];
    for (uint i = 1; i < (NT + lanes - 1) / lanes; ++i)
        total += partial[i];
    const float r = rsqrt(total / float(p.COLS) + EPS);
    for (uint c2 = tid; c2 < p.COLS; c2 += NT)
        y[base + c2] = x[base + c2] * r * w[c2];
}
