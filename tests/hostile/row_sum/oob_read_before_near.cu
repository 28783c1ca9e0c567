// HOSTILE oob_read_before_near: a row sum taken from an exclusive-scan kernel: each thread reads the element BEFORE
// its column (xr[c - 1], as the scan does) and the block adds the row's last element at the end, so the total is
// sum(row) plus xr[-1], which the scan treated as 0 but which is really the previous row's last element - and for
// row 0 the element before x (a NaN guard).
// EXPECT: status=failed failure=out_of_bounds_read.
// peak: entry=row_sum_scan grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
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

extern "C" __global__ void __launch_bounds__(BLOCK)
row_sum_scan(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        acc += xr[c - 1];                                        // BUG: xr[-1] is not 0, and for row 0 not even x
    acc = block_sum(acc, red);
    if (threadIdx.x == 0)
        y[blockIdx.x] = acc + xr[COLS - 1];
}
