// HOSTILE oob_read_after_far: a block-per-row row sum fused with a bias add, y[r] = sum(row r) + bias[r], the bias
// read from where the author's layer kept it, 16 MiB past the end of x (x[ROWS*COLS + 2^22 + r]). Nothing was
// allocated there for this caller: the bias is whatever those bytes hold (zeros would give the right answer) or
// the read faults.
// EXPECT: status=failed (wrong_result, nan_or_inf or out_of_bounds_read from the values read; sanitizer_memcheck
// where compute-sanitizer runs and they did no harm) or error kernel_fault/worker_died if unmapped. Never
// benchmarked.
// peak: entry=row_sum_bias grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
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
#define BIAS_AFTER (1 << 22)                                     // floats: 16 MiB

extern "C" __global__ void __launch_bounds__(BLOCK)
row_sum_bias(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    const float* xr = x + (size_t)blockIdx.x * COLS;
    const float* bias = x + (size_t)ROWS * COLS + BIAS_AFTER;    // BUG: nothing was allocated there
    float acc = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        acc += xr[c];
    acc = block_sum(acc, red);
    if (threadIdx.x == 0)
        y[blockIdx.x] = acc + bias[blockIdx.x];
}
