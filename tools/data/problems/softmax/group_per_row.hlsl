// Row softmax, one thread group per row: 64 threads stride over the row; max and sum reduced in groupshared memory.
// Groups past 65,535 rows spread over y (every Vulkan device's limit along x): row = gid.y * 65535 + gid.x.
// peak: entry=main groups=(min(ROWS, 65535), cdiv(ROWS, 65535), 1)
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<T> x;
[[vk::binding(1)]] RWStructuredBuffer<T> y;
#define THREADS 64
groupshared float partial[THREADS];

[numthreads(THREADS, 1, 1)]
void main(uint3 gid : SV_GroupID, uint tid : SV_GroupIndex)
{
    uint row = gid.y * 65535 + gid.x;
    if (row >= p.ROWS) return;  // the same for the whole group: before any barrier
    uint base = row * p.COLS;
    float m = -3.402823466e38;
    for (uint c = tid; c < p.COLS; c += THREADS)
        m = max(m, to_f32(x[base + c]));
    partial[tid] = m;
    GroupMemoryBarrierWithGroupSync();
    for (uint s = THREADS / 2; s > 0; s >>= 1) {
        if (tid < s)
            partial[tid] = max(partial[tid], partial[tid + s]);
        GroupMemoryBarrierWithGroupSync();
    }
    m = partial[0];
    GroupMemoryBarrierWithGroupSync();
    float sum = 0.0;
    for (uint c2 = tid; c2 < p.COLS; c2 += THREADS)
        sum += exp(to_f32(x[base + c2]) - m);
    partial[tid] = sum;
    GroupMemoryBarrierWithGroupSync();
    for (uint s2 = THREADS / 2; s2 > 0; s2 >>= 1) {
        if (tid < s2)
            partial[tid] += partial[tid + s2];
        GroupMemoryBarrierWithGroupSync();
    }
    float inv = 1.0 / partial[0];
    for (uint c3 = tid; c3 < p.COLS; c3 += THREADS)
        y[base + c3] = from_f32(exp(to_f32(x[base + c3]) - m) * inv);
}
