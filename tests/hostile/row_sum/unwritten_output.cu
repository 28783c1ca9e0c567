// HOSTILE unwritten_output: a persistent row sum: at most 96 blocks, each summing a contiguous run of rows (better
// locality than striding) of length ROWS / gridDim.x - rounded down, with nothing for the remainder: the last
// ROWS % gridDim.x rows are never summed (64 rows at 256, 4 at 100).
// EXPECT: status=failed failure=unwritten_output.
// peak: entry=row_sum_runs grid=(min(ROWS, 96), 1, 1) block=(256, 1, 1) shared=0
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
row_sum_runs(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[2][WARPS];                              // by row parity: one barrier per row
    const int per_block = ROWS / gridDim.x;                      // BUG: the remainder rows belong to no block
    const int first = blockIdx.x * per_block;
    for (int i = 0; i < per_block; ++i) {
        const float* xr = x + (size_t)(first + i) * COLS;
        float acc = 0.0f;
        for (int c = threadIdx.x; c < COLS; c += BLOCK)
            acc += xr[c];
        acc = block_sum(acc, red[i & 1]);
        if (threadIdx.x == 0)
            y[first + i] = acc;
    }
}
