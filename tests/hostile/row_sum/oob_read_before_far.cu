// HOSTILE oob_read_before_far: a block-per-row row sum that adds a carried-in partial sum per row, read from where
// the author's split reduction kept the first pass's results: a workspace 2 MiB before x (x[-2^19 + row]). Nothing
// was allocated there for this caller: the carry is whatever those bytes hold (zeros would pass) or the read faults.
// EXPECT: status=failed (out_of_bounds_read, nan_or_inf or wrong_result from the values read; sanitizer_memcheck
// where compute-sanitizer runs and they did no harm) or error kernel_fault/worker_died if unmapped. Never
// benchmarked.
// peak: entry=row_sum_carry grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
#define BLOCK 256
#define WARPS (BLOCK / 32)

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
row_sum_carry(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        acc += xr[c];
    acc = block_sum(acc, red);
    if (threadIdx.x == 0)
        y[blockIdx.x] = acc + (x - WORKSPACE_BEFORE)[blockIdx.x];   // BUG: nothing was allocated there
}
