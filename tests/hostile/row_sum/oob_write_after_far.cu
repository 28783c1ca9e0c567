// HOSTILE oob_write_after_far: a correct block-per-row row sum that publishes a second copy of each row's sum "for
// the host" 16 MiB past the end of y (y[ROWS + 2^22 + row]): past any guard, silently corrupting whatever lies
// there.
// EXPECT: status=failed (sanitizer_memcheck where compute-sanitizer runs; else an out-of-bounds or input_modified
// verdict, or wrong_result, wherever it lands) or error kernel_fault/worker_died if unmapped. Never benchmarked.
// peak: entry=row_sum_copy grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
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
#define COPY_AFTER (1 << 22)                                     // floats: 16 MiB

extern "C" __global__ void __launch_bounds__(BLOCK)
row_sum_copy(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        acc += xr[c];
    acc = block_sum(acc, red);
    if (threadIdx.x == 0) {
        y[blockIdx.x] = acc;
        y[(size_t)ROWS + COPY_AFTER + blockIdx.x] = acc;         // BUG: far past y
    }
}
