// row_sum, hlsl-wave-reduction (WaveActiveSum / WaveActiveMax): one thread group per row; each thread strides over
// the row (consecutive threads, consecutive elements). One pass accumulating in f32; thread 0 writes y[row]. Each
// reduction: WaveActiveSum/WaveActiveMax within a wave, one groupshared exchange of the waves' results, one
// barrier. f16 storage: the buffers hold half (16-bit, needs the device's storageBuffer16BitAccess); loads convert
// to float, all math is f32, stores round to half. Any ROWS, COLS >= 1.
// peak: entry=main groups=(min(ROWS, 65535), cdiv(ROWS, 65535), 1)
// peak: params NT=[256, 128, 512, 64]
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<half> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;

groupshared float partial[NT];  // one slot per wave; NT slots are enough for any wave size

// Wave intrinsics inside each wave, one groupshared exchange between waves. The wave size is read at run time
// (32 on NVIDIA, 32 or 64 on AMD, 8 on lavapipe), never assumed. Waves are taken to be consecutive runs of
// SV_GroupIndex (wave w holds w * lanes ... (w + 1) * lanes - 1, as on NVIDIA, AMD, Intel and lavapipe). Every
// thread adds the partials in the same order: the same result in all of them, the same bits on every launch.
float group_reduce(float v, uint tid, bool is_max)
{
    const uint lanes = WaveGetLaneCount();
    const float w = is_max ? WaveActiveMax(v) : WaveActiveSum(v);
    if (WaveIsFirstLane())
        partial[tid / lanes] = w;
    GroupMemoryBarrierWithGroupSync();
    float total = partial[0];
    for (uint i = 1; i < (NT + lanes - 1) / lanes; ++i)
        total = is_max ? max(total, partial[i]) : total + partial[i];
    GroupMemoryBarrierWithGroupSync();  // partial is written again by the next reduction
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
