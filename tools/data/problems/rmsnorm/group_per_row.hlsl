// RMS norm, one thread group per row: 64 threads stride over the row; the sum of squares reduced in groupshared memory.
// Groups past 65,535 rows spread over y (every Vulkan device's limit along x): row = gid.y * 65535 + gid.x.
// peak: entry=main groups=(min(ROWS, 65535), cdiv(ROWS, 65535), 1)
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<T> x;
[[vk::binding(1)]] StructuredBuffer<T> w;
[[vk::binding(2)]] RWStructuredBuffer<T> y;
#define THREADS 64
groupshared float partial[THREADS];

[numthreads(THREADS, 1, 1)]
void main(uint3 gid : SV_GroupID, uint tid : SV_GroupIndex)
{
    uint row = gid.y * 65535 + gid.x;
    if (row >= p.ROWS) return;  // the same for the whole group: before any barrier
    uint base = row * p.COLS;
    float ss = 0.0;
    for (uint c = tid; c < p.COLS; c += THREADS) {
        float v = to_f32(x[base + c]);
        ss = mad(v, v, ss);
    }
    partial[tid] = ss;
    GroupMemoryBarrierWithGroupSync();
    for (uint s = THREADS / 2; s > 0; s >>= 1) {
        if (tid < s)
            partial[tid] += partial[tid + s];
        GroupMemoryBarrierWithGroupSync();
    }
    float r = rsqrt(partial[0] / float(p.COLS) + 1e-6);
    for (uint c2 = tid; c2 < p.COLS; c2 += THREADS)
        y[base + c2] = from_f32(to_f32(x[base + c2]) * r * to_f32(w[c2]));
}
