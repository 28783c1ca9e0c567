// HOSTILE race_missing_barrier: examples/row_sum/cuda/2_warp_shuffle.cu with __syncwarp() where the __syncthreads()
// was ("only warp 0 reads the partials, so syncing warp 0 is enough"): __syncwarp waits for the lanes of the calling
// warp only, so warp 0 can fold red[1..7] before warps 1-7 have stored their sums there - and read what an earlier
// block on that SM left behind.
// EXPECT: status=failed, failure wrong_result / nondeterministic / nan_or_inf, or sanitizer_racecheck (and
// sanitizer_initcheck for shared memory nothing wrote) where compute-sanitizer runs.
// peak: entry=row_sum_syncwarp grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
#define BLOCK 256
#define WARPS (BLOCK / 32)

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
row_sum_syncwarp(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float acc = 0.0f;
    for (int c = tid; c < COLS; c += BLOCK)
        acc += xr[c];
    acc = warp_sum(acc);
    if (lane == 0)
        red[warp] = acc;
    __syncwarp();                                                // BUG: waits for this warp only
    if (warp == 0) {
        acc = warp_sum(lane < WARPS ? red[lane] : 0.0f);
        if (lane == 0)
            y[blockIdx.x] = acc;
    }
}
