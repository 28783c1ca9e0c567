// HOSTILE tile_multiple_only: a row sum that reads x as float4 (one 16-byte load per thread per step, one group of
// 64 per row, groupshared tree), with the row's vectors at x4[row * (COLS / 4) + i]: right when COLS is a multiple
// of 4 (then every row starts on a 16-byte boundary); otherwise each row's vectors start in the wrong place and its
// last COLS % 4 elements are never added.
// EXPECT at 64x128 and 64x100 (both multiples of 4): benchmarked, but generality.passed == false and head does not
// move.
// peak: entry=main groups=(ROWS, 1, 1)
#define NT 64
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float4> x4;                  // x, four floats at a time
[[vk::binding(1)]] RWStructuredBuffer<float> y;

groupshared float red[NT];

[numthreads(NT, 1, 1)]
void main(uint3 gid : SV_GroupID, uint tid : SV_GroupIndex)
{
    const uint nvec = p.COLS / 4;                                // BUG: assumes COLS % 4 == 0
    const uint base = gid.x * nvec;
    float acc = 0.0;
    for (uint i = tid; i < nvec; i += NT) {
        const float4 v = x4[base + i];
        acc += (v.x + v.y) + (v.z + v.w);
    }
    red[tid] = acc;
    GroupMemoryBarrierWithGroupSync();
    for (uint s = NT / 2; s > 0; s >>= 1) {
        if (tid < s)
            red[tid] += red[tid + s];
        GroupMemoryBarrierWithGroupSync();
    }
    if (tid == 0)
        y[gid.x] = red[0];
}
