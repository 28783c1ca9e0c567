// HOSTILE oob_write_after_near: a row sum with one group of 64 per PAIR of rows ("two rows per group halve the
// number of groups"): threads 0-31 sum row 2g, threads 32-63 row 2g + 1, each half in a groupshared tree. The
// dispatch is ROWS / 2 + 1 groups (one extra for an odd ROWS) and the row guard reads `row <= ROWS`, so whatever
// ROWS is, some half computes row ROWS: it reads past the end of x and stores at y[ROWS], just past the output.
// EXPECT: status=failed failure=out_of_bounds_write (after y).
// peak: entry=main groups=(ROWS // 2 + 1, 1, 1)
#define HALF 32
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;

groupshared float partial[2 * HALF];

[numthreads(2 * HALF, 1, 1)]
void main(uint3 gid : SV_GroupID, uint tid : SV_GroupIndex)
{
    const uint half_id = tid / HALF, t = tid % HALF;
    const uint row = 2 * gid.x + half_id;
    float acc = 0.0;
    if (row <= p.ROWS)                                           // BUG: <= lets row ROWS through
        for (uint c = t; c < p.COLS; c += HALF)
            acc += x[row * p.COLS + c];
    partial[tid] = acc;
    GroupMemoryBarrierWithGroupSync();
    for (uint s = HALF / 2; s > 0; s >>= 1) {
        if (t < s)
            partial[tid] += partial[tid + s];
        GroupMemoryBarrierWithGroupSync();
    }
    if (t == 0 && row <= p.ROWS)
        y[row] = partial[tid];
}
