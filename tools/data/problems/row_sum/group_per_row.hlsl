// Row sum, one thread group per row: 64 threads stride over the row; partial sums reduced in groupshared memory.
// Groups past 65,535 rows spread over y (every Vulkan device's limit along x): row = gid.y * 65535 + gid.x.
// peak: entry=main groups=(min(ROWS, 65535), cdiv(ROWS, 65535), 1)
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<T> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;
#define THREADS 64
groupshared float partial[THREADS];

[numthreads(THREADS, 1, 1)]
void main(uint3 gid : SV_GroupID, uint tid : SV_GroupIndex)
{
    uint row = gid.y * 65535 + gid.x;
    if (row >= p.ROWS) return;  // the same for the whole group: before any barrier
    uint base = row * p.COLS;
    float sum = 0.0;
    for (uint c = tid; c < p.COLS; c += THREADS)
        sum += to_f32(x[base + c]);
    partial[tid] = sum;
    GroupMemoryBarrierWithGroupSync();
    for (uint s = THREADS / 2; s > 0; s >>= 1) {
        if (tid < s)
            partial[tid] += partial[tid + s];
        GroupMemoryBarrierWithGroupSync();
    }
    if (tid == 0)
        y[row] = partial[0];
}
