// KernelBench level 1, LeakyReLU (negative_slope 0.01): out = x > 0 ? x : 0.01 x elementwise over BATCH_SIZE x DIM floats.
// A grid-stride loop over float4 (buffers are 256-byte aligned), then a scalar tail for the last n % 4 elements; any sizes.
// peak: entry=leaky_relu grid=(SM_COUNT * 16, 1, 1) block=(256, 1, 1) shared=0
__device__ __forceinline__ float op(float v) { return v > 0.0f ? v : 0.01f * v; }

extern "C" __global__ void leaky_relu(const float* __restrict__ x, float* __restrict__ out, int BATCH_SIZE, int DIM)
{
    const size_t n = (size_t)BATCH_SIZE * (size_t)DIM;
    const size_t n4 = n / 4;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* out4 = reinterpret_cast<float4*>(out);
    for (size_t i = first; i < n4; i += stride) {
        float4 v = x4[i];
        out4[i] = make_float4(op(v.x), op(v.y), op(v.z), op(v.w));
    }
    for (size_t i = n4 * 4 + first; i < n; i += stride) out[i] = op(x[i]);
}
