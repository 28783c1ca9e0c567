// HOSTILE oob_write_after_near: a groupshared-tree RMS norm (one group per row) that also stores the row's inverse
// RMS "for the backward pass" in a stats column the author believed follows each row: y[(row + 1) * COLS]. That is
// the next row's first element (which the next group overwrites, or not, depending on order), and for the last row
// y[ROWS*COLS]: just past the output.
// EXPECT: status=failed failure=out_of_bounds_write (after y).
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
    if (tid == 0)
        y[base + p.COLS] = r;                                    // BUG: the "stats column" is the next row
}
