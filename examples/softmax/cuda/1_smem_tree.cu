// Step 1, row-per-block-reduction: one block per row. Each thread strides over the row (thread t reads columns
// t, t + BLOCK, ...: consecutive threads, consecutive addresses), and the per-thread partials meet in a
// shared-memory tree (log2(BLOCK) barriers). Three passes over the row: max, sum of exp(x - max), write.
// f32 math for every dtype. Any ROWS, COLS >= 1. BLOCK is a power of two.
// peak: entry=softmax_smem grid=(ROWS, 1, 1) block=(BLOCK, 1, 1) shared=0
// peak: params BLOCK=[256, 128, 512, 1024]
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef float T;  // the session's dtype: float, __half or __nv_bfloat16 (the only line to change)

#define LOG2E 1.4426950408889634f
#define LOWEST (-3.402823466e38f)  // -FLT_MAX: a finite start, so (m - max) is never inf - inf

template <bool MAX>
__device__ __forceinline__ float block_reduce(float v, float* red)
{
    const int tid = threadIdx.x;
    red[tid] = v;
    __syncthreads();
#pragma unroll
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s)
            red[tid] = MAX ? fmaxf(red[tid], red[tid + s]) : red[tid] + red[tid + s];
        __syncthreads();
    }
    const float total = red[0];
    __syncthreads();  // red is written again by the next reduction
    return total;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_smem(const T* __restrict__ x, T* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[BLOCK];
    const size_t base = (size_t)blockIdx.x * COLS;
    const T* xr = x + base;
    T* yr = y + base;

    float m = LOWEST;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        m = fmaxf(m, static_cast<float>(xr[c]));
    m = block_reduce<true>(m, red);

    float s = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        s += exp2f((static_cast<float>(xr[c]) - m) * LOG2E);
    const float inv = 1.0f / block_reduce<false>(s, red);

    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        yr[c] = T(exp2f((static_cast<float>(xr[c]) - m) * LOG2E) * inv);
}
