// HOSTILE oob_read_after_far: a fused residual RMS norm, y = rmsnorm(x + res) * w, where the residual is read from
// where the author's transformer block kept it, 16 MiB past the end of x: x[ROWS*COLS + 2^22 + i]. Nothing was
// allocated there for this caller: the residual is whatever those bytes hold (zeros would give the right answer)
// or the read faults.
// EXPECT: status=failed (wrong_result, nan_or_inf or out_of_bounds_read from the values read; sanitizer_memcheck
// where compute-sanitizer runs and they did no harm) or error kernel_fault/worker_died if unmapped. Never
// benchmarked.
// peak: entry=rmsnorm_res grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
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
#define RESIDUAL_AFTER (1 << 22)                                 // floats: 16 MiB

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_res(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    const size_t base = (size_t)blockIdx.x * COLS;
    const float* xr = x + base;
    const float* res = x + (size_t)ROWS * COLS + RESIDUAL_AFTER + base;   // BUG: nothing was allocated there
    float* yr = y + base;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK) {
        const float v = xr[c] + res[c];
        ss += v * v;
    }
    const float r = rsqrtf(block_sum(ss, red) / COLS + EPS);
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        yr[c] = (xr[c] + res[c]) * r * w[c];
}
