// peak: entry=relu_kernel grid=(cdiv(BATCH_SIZE * DIM, 4096), 1, 1) block=(256, 1, 1) shared=0
// ReLU over the flat BATCH_SIZE*DIM tensor (size_t indexing: the default size has 1.6e9 elements).
// Each thread moves 4 float4 (16-byte) vectors; the buffer is 256-byte aligned so the flat array is
// vectorizable from 0; the last block handles the <4-element scalar tail.
#define VPT 4      // float4 per thread
#define BLOCK 256
extern "C" __global__ void __launch_bounds__(BLOCK)
relu_kernel(const float* __restrict__ x, float* __restrict__ out, int BATCH_SIZE, int DIM)
{
    const size_t n = (size_t)BATCH_SIZE * (size_t)DIM;
    const size_t nvec = n >> 2;
    const float4* __restrict__ x4 = reinterpret_cast<const float4*>(x);
    float4* __restrict__ o4 = reinterpret_cast<float4*>(out);
    const size_t base = (size_t)blockIdx.x * (BLOCK * VPT) + threadIdx.x;
    float4 v[VPT];
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const size_t idx = base + (size_t)i * BLOCK;
        if (idx < nvec) v[i] = __ldcs(x4 + idx);
    }
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const size_t idx = base + (size_t)i * BLOCK;
        if (idx < nvec) {
            float4 r;
            r.x = v[i].x < 0.f ? 0.f : v[i].x;
            r.y = v[i].y < 0.f ? 0.f : v[i].y;
            r.z = v[i].z < 0.f ? 0.f : v[i].z;
            r.w = v[i].w < 0.f ? 0.f : v[i].w;
            __stcs(o4 + idx, r);
        }
    }
    if (blockIdx.x == gridDim.x - 1) {
        const size_t t = (nvec << 2) + threadIdx.x;
        if (t < n) { const float a = x[t]; out[t] = a < 0.f ? 0.f : a; }
    }
}
