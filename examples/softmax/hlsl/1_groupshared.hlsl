// softmax, row-per-block-reduction with a groupshared tree: one thread group per row; each thread strides over the
// row (consecutive threads, consecutive elements). Three passes over the row: max, sum of exp(x - max), write. The
// partials meet in a groupshared tree (log2(NT) barriers per reduction). f32 buffers and math. Any ROWS, COLS >= 1.
// peak: entry=main groups=(min(ROWS, 65535), cdiv(ROWS, 65535), 1)
// peak: params NT=[256, 128, 512, 64]
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;
#define LOG2E 1.4426950408889634
#define LOWEST (-3.402823466e38)  // -FLT_MAX: (m - max) is never inf - inf

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
    float m = LOWEST;
    for (uint c = tid; c < p.COLS; c += NT)
        m = max(m, x[base + c]);
    m = group_reduce(m, tid, true);
    float s = 0.0;
    for (uint c = tid; c < p.COLS; c += NT)
        s += exp2((x[base + c] - m) * LOG2E);
    const float inv = 1.0 / group_reduce(s, tid, false);
    for (uint c = tid; c < p.COLS; c += NT)
        y[base + c] = (exp2((x[base + c] - m) * LOG2E) * inv);
}
