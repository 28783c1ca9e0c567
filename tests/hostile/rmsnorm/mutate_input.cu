// HOSTILE mutate_input: a block-per-row RMS norm that normalises x in place through a const_cast ("x * r is needed
// twice in the backward pass anyway") and then writes y = x * w from the normalised row: the caller's x is
// replaced by x * rsqrt(mean(x^2) + eps).
// EXPECT: status=failed failure=input_modified.
// peak: entry=rmsnorm_inplace grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
#define BLOCK 256
#define WARPS (BLOCK / 32)
#define EPS 1e-6f

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float block_sum(float v, float* red)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_sum(v);
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    return warp_sum(lane < WARPS ? red[lane] : 0.0f);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_inplace(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    float* xr = const_cast<float*>(x) + (size_t)blockIdx.x * COLS;   // BUG: the input used as scratch
    float* yr = y + (size_t)blockIdx.x * COLS;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        ss += xr[c] * xr[c];
    const float r = rsqrtf(block_sum(ss, red) / COLS + EPS);
    for (int c = threadIdx.x; c < COLS; c += BLOCK) {
        xr[c] *= r;
        yr[c] = xr[c] * w[c];
    }
}
