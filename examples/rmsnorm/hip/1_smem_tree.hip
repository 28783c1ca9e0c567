// HIP spelling of examples/rmsnorm/cuda/1_smem_tree.cu: the same kernel with HIP's headers and types and HIP's
// mask-free __shfl_xor(v, o, 32). Reductions run over 32-lane groups (width 32), so results are the same
// on NVIDIA's 32-lane warps and AMD's 64-lane waves, and the launch geometry does not depend on warpSize.
// Step 1, row-per-block-reduction: one block per row. Each thread strides over the row (consecutive threads,
// consecutive addresses) summing x^2; the partials meet in a shared-memory tree (log2(BLOCK) barriers); a
// second pass writes y = x * rsqrt(mean(x^2) + 1e-6) * w. f32 math for every dtype. Any ROWS, COLS >= 1.
// peak: entry=rmsnorm_smem grid=(ROWS, 1, 1) block=(BLOCK, 1, 1) shared=0
// peak: params BLOCK=[256, 128, 512, 1024]
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bfloat16.h>

typedef float T;  // the session's dtype: float, __half or hip_bfloat16 (the only line to change)

#define EPS 1e-6f

__device__ __forceinline__ float block_sum(float v, float* red)
{
    const int tid = threadIdx.x;
    red[tid] = v;
    __syncthreads();
#pragma unroll
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s)
            red[tid] += red[tid + s];
        __syncthreads();
    }
    return red[0];  // one reduction per launch: red is not written again
}

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_smem(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[BLOCK];
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
