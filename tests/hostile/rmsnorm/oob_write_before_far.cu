// HOSTILE oob_write_before_far: a correct block-per-row RMS norm that saves each row's inverse RMS in a workspace it
// takes to start 2 MiB before y (y[-2^19 + row]): nothing was allocated there, and it is past the guard in front of
// the output.
// EXPECT: status=failed (sanitizer_memcheck where compute-sanitizer runs; out_of_bounds_write or input_modified if
// it lands in another buffer or its guard; wrong_result if in memory the validator reads) or error
// kernel_fault/worker_died if unmapped. Never benchmarked.
// peak: entry=rmsnorm_ws grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
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
#define WORKSPACE_BEFORE (1 << 19)                              // floats: 2 MiB

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_ws(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float* yr = y + (size_t)blockIdx.x * COLS;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        ss += xr[c] * xr[c];
    const float r = rsqrtf(block_sum(ss, red) / COLS + EPS);
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        yr[c] = xr[c] * r * w[c];
    if (threadIdx.x == 0)
        (y - WORKSPACE_BEFORE)[blockIdx.x] = r;                  // BUG: nothing was allocated there
}
