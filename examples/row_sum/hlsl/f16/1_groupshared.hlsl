// row_sum, row-per-block-reduction with a groupshared tree: one thread group per row; each thread strides over the
// row (consecutive threads, consecutive elements). One pass accumulating in f32; thread 0 writes y[row]. The
// partials meet in a groupshared tree (log2(NT) barriers per reduction). f16 storage: the buffers hold half
// (16-bit, needs the device's storageBuffer16BitAccess); loads convert to float, all math is f32, stores round to
// half. Any ROWS, COLS >= 1.
// peak: entry=main groups=(min(ROWS, 65535), cdiv(ROWS, 65535), 1)
// peak: params NT=[256, 128, 512, 64]
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<half> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;

groupshared float red[NT];

// Shared-memory tree: log2(NT) barriers; every thread returns red[0]. NT is a power of two.
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
    GroupMemoryBarrierWithGroupSync();  // red is written again by the next reduction
    return total;
}

[numthreads(NT, 1, 1)]
void main(uint3 gid : SV_GroupID, uint tid : SV_GroupIndex)
{
    const uint row = gid.y * 65535 + gid.x;  // rows over x and y: at most 65535 groups per dimension
    if (row >= p.ROWS)
        return;  // the whole group leaves: the barriers below stay in uniform control flow
    const uint base = row * p.COLS;
    float acc = 0.0;
    for (uint c = tid; c < p.COLS; c += NT)
        acc += float(x[base + c]);
    acc = group_reduce(acc, tid, false);
    if (tid == 0)
        y[row] = acc;
}
