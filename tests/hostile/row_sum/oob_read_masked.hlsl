// HOSTILE oob_read_masked: a row sum (one group of 64 per row) that walks the row in aligned 8-element chunks over
// the flat array, from the chunk holding the row's first element to the one holding its last, and masks the
// elements outside the row after loading them (`v = x[i]; if (i < begin || i >= end) v = 0;`): branch-free loads.
// Every sum is exact, but the last row's last chunk runs up to 7 elements past the end of x whenever ROWS * COLS is
// not a multiple of 8 (6400 and 8192 are; the sampled 100x77 is not). The guards never see it (the value is
// discarded); the validation layer's GPU-assisted validation does.
// EXPECT: status=failed failure=sanitizer_vulkan_oob where the layer is installed (vulkan-validationlayers).
// peak: entry=main groups=(ROWS, 1, 1)
#define NT 64
#define CHUNK 8
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;

groupshared float red[NT];

[numthreads(NT, 1, 1)]
void main(uint3 gid : SV_GroupID, uint tid : SV_GroupIndex)
{
    const uint begin = gid.x * p.COLS, end = begin + p.COLS;
    const uint first = begin / CHUNK, last = (end + CHUNK - 1) / CHUNK;  // BUG: the last chunk may pass the end of x
    float acc = 0.0;
    for (uint k = first + tid; k < last; k += NT) {
        [unroll] for (uint j = 0; j < CHUNK; ++j) {
            const uint i = k * CHUNK + j;
            float v = x[i];
            if (i < begin || i >= end)
                v = 0.0;
            acc += v;
        }
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
