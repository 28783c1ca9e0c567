// Step 2, warp-shuffle-reduction: step 1 with the tree replaced by warp shuffles: each warp folds its 32 partial
// sums with __shfl_xor_sync (no barrier), lane 0 leaves the warp's sum in shared memory, one barrier, and warp 0
// folds the BLOCK/32 sums; thread 0 writes y[row]. Any ROWS, COLS >= 1.
// peak: entry=row_sum_shfl grid=(ROWS, 1, 1) block=(BLOCK, 1, 1) shared=0
// peak: params BLOCK=[256, 128, 512, 1024]
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef float T;  // the session's dtype: float, __half or __nv_bfloat16 (the only line to change)

#define WARPS (BLOCK / 32)

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
row_sum_shfl(const T* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const T* xr = x + (size_t)blockIdx.x * COLS;

    float acc = 0.0f;
    for (int c = tid; c < COLS; c += BLOCK)
        acc += static_cast<float>(xr[c]);
    acc = warp_sum(acc);
    if (lane == 0)
        red[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = warp_sum(lane < WARPS ? red[lane] : 0.0f);
        if (lane == 0)
            y[blockIdx.x] = acc;
    }
}
