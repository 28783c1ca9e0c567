// HOSTILE oob_write_after_far: a correct block-per-row RMS norm that dumps each row's inverse RMS into a debug area
// 16 MiB past the end of y (y[ROWS*COLS + 2^22 + row]): past any guard, silently corrupting whatever lies there.
// EXPECT: status=failed (sanitizer_memcheck where compute-sanitizer runs; else an out-of-bounds or input_modified
// verdict, or wrong_result, wherever it lands) or error kernel_fault/worker_died if unmapped. Never benchmarked.
// peak: entry=rmsnorm_dbg grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
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
#define DEBUG_AFTER (1 << 22)                                    // floats: 16 MiB

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_dbg(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int ROWS, int COLS)
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
        y[(size_t)ROWS * COLS + DEBUG_AFTER + blockIdx.x] = r;   // BUG: far past y
}
