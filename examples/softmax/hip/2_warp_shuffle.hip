// HIP spelling of examples/softmax/cuda/2_warp_shuffle.cu: the same kernel with HIP's headers and types and HIP's
// mask-free __shfl_xor(v, o, 32). Reductions run over 32-lane groups (width 32), so results are the same
// on NVIDIA's 32-lane warps and AMD's 64-lane waves, and the launch geometry does not depend on warpSize.
// Step 2, warp-shuffle-reduction: step 1 with the shared-memory tree replaced by a block reduce of warp
// shuffles: each warp folds its 32 values with __shfl_xor(v, o, 32) (5 steps, no barrier), lane 0 leaves the warp's
// result in shared memory, one barrier, then every warp folds the BLOCK/32 partials the same way, so every
// thread holds the same bits. One barrier per reduction instead of log2(BLOCK) + 1; each reduction has its own
// shared array, so no barrier is needed before the next one writes. Any ROWS, COLS >= 1.
// peak: entry=softmax_shfl grid=(ROWS, 1, 1) block=(BLOCK, 1, 1) shared=0
// peak: params BLOCK=[256, 128, 512, 1024]
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bfloat16.h>

typedef float T;  // the session's dtype: float, __half or hip_bfloat16 (the only line to change)

#define LOG2E 1.4426950408889634f
#define LOWEST (-3.402823466e38f)
#define WARPS (BLOCK / 32)

template <bool MAX>
__device__ __forceinline__ float warp_reduce(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float other = __shfl_xor(v, o, 32);
        v = MAX ? fmaxf(v, other) : v + other;
    }
    return v;  // the same bits in every lane: each butterfly step adds the same two values on both sides
}

template <bool MAX>
__device__ __forceinline__ float block_reduce(float v, float* red)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_reduce<MAX>(v);
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    v = lane < WARPS ? red[lane] : (MAX ? LOWEST : 0.0f);
    return warp_reduce<MAX>(v);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_shfl(const T* __restrict__ x, T* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red_max[WARPS], red_sum[WARPS];
    const size_t base = (size_t)blockIdx.x * COLS;
    const T* xr = x + base;
    T* yr = y + base;

    float m = LOWEST;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        m = fmaxf(m, static_cast<float>(xr[c]));
    m = block_reduce<true>(m, red_max);

    float s = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        s += exp2f((static_cast<float>(xr[c]) - m) * LOG2E);
    const float inv = 1.0f / block_reduce<false>(s, red_sum);

    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        yr[c] = T(exp2f((static_cast<float>(xr[c]) - m) * LOG2E) * inv);
}
