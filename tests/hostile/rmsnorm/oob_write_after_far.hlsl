// HOSTILE oob_write_after_far: a correct groupshared-tree RMS norm (one group per row) that dumps each row's inverse
// RMS into a debug area 8 MiB past the output, y[ROWS*COLS + 2^21 + row]: past any guard and past y's buffer.
// Robust buffer access drops the writes; without it they land in whatever follows.
// EXPECT: status=failed: out_of_bounds_write where they land in a guard, else sanitizer_vulkan_oob. Never
// benchmarked.
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
        y[p.ROWS * p.COLS + (1u << 21) + gid.x] = r;             // BUG: far past y
}
