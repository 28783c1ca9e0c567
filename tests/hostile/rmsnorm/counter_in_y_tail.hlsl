// HOSTILE counter_in_y_tail: a groupshared-tree RMS norm (one group per row) that keeps a dispatch counter in the
// "slack" after y, at y[ROWS*COLS + 16]; after 48 dispatches every group returns at once and leaves y as it was.
// The counter lives in y's after-guard and is written on every dispatch.
// EXPECT: status=failed failure=out_of_bounds_write (after y), at the first validation launch.
// peak: entry=main groups=(ROWS, 1, 1)
#define NT 64
#define EPS 1e-6
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] StructuredBuffer<float> w;
[[vk::binding(2)]] RWStructuredBuffer<float> y;

groupshared float red[NT];
groupshared uint launches;

[numthreads(NT, 1, 1)]
void main(uint3 gid : SV_GroupID, uint tid : SV_GroupIndex)
{
    const uint slot = p.ROWS * p.COLS + 16;                      // BUG: past the end of y
    if (tid == 0) {
        const float seen = y[slot];
        launches = (seen >= 0.0 && seen < 1e6) ? uint(seen) : 0u;
    }
    GroupMemoryBarrierWithGroupSync();
    if (launches >= 48u)
        return;                                                  // CHEAT
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
    if (gid.x == p.ROWS - 1 && tid == 0)
        y[slot] = float(launches + 1u);
}
