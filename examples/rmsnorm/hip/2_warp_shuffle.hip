// HIP spelling of examples/rmsnorm/cuda/2_warp_shuffle.cu: the same kernel with HIP's headers and types and HIP's
// mask-free __shfl_xor(v, o, 32). Reductions run over 32-lane groups (width 32), so results are the same
// on NVIDIA's 32-lane warps and AMD's 64-lane waves, and the launch geometry does not depend on warpSize.
// Step 2, warp-shuffle-reduction: step 1 with the shared-memory tree replaced by warp shuffles: each warp folds
// its 32 partial sums with __shfl_xor(v, o, 32) (no barrier), lane 0 leaves the warp's sum in shared memory, one
// barrier, and every warp folds the BLOCK/32 sums in the same order (every thread gets the same bits).
// Any ROWS, COLS >= 1.
// peak: entry=rmsnorm_shfl grid=(ROWS, 1, 1) block=(BLOCK, 1, 1) shared=0
// peak: params BLOCK=[256, 128, 512, 1024]
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bfloat16.h>

typedef float T;  // the session's dtype: float, __half or hip_bfloat16 (the only line to change)

#define EPS 1e-6f
#define WARPS (BLOCK / 32)

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor(v, o, 32);
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
rmsnorm_shfl(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    const size_t base = (size_t)blockIdx.x * COLS;
    const T* xr = x + base;
    T* yr = y + base;

    float ss = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK) {
        const float v = static_cast<float>(xr[c]);
        ss += v * v;
    }
    const float r = rsqrtf(block_sum(ss, red) / COLS + EPS);

    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        yr[c] = T(static_cast<float>(xr[c]) * r * static_cast<float>(w[c]));
}
