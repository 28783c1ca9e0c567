// HIP spelling of examples/softmax/cuda/3_vectorized.cu: the same kernel with HIP's headers and types and HIP's
// mask-free __shfl_xor(v, o, 32). Reductions run over 32-lane groups (width 32), so results are the same
// on NVIDIA's 32-lane warps and AMD's 64-lane waves, and the launch geometry does not depend on warpSize.
// Step 3, vectorized-row-access: step 2 with 16-byte loads and stores (4 floats or 8 halves per access).
// Row r starts at element r * COLS, which is 16-byte aligned only when (r * COLS) % VEC == 0, so each row is
// split into a scalar head (the < VEC elements before the first aligned address), nvec aligned vectors, and a
// scalar tail: every row takes the vector path, whatever COLS is. Three passes (max, sum, write); the second
// and third re-read the row, from L2. `#pragma unroll 4` keeps 4 loads per thread in flight.
// Any ROWS, COLS >= 1.
// peak: entry=softmax_vec grid=(ROWS, 1, 1) block=(BLOCK, 1, 1) shared=0
// peak: params BLOCK=[256, 128, 512, 1024]
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bfloat16.h>

typedef float T;  // the session's dtype: float, __half or hip_bfloat16 (the only line to change)

#define LOG2E 1.4426950408889634f
#define LOWEST (-3.402823466e38f)
#define WARPS (BLOCK / 32)
#define VEC ((int)(16 / sizeof(T)))  // elements per 16-byte access: 4 floats or 8 halves

__device__ __forceinline__ void load_vec(const T* p, float (&f)[VEC])
{
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < VEC; ++j)
        f[j] = static_cast<float>(e[j]);
}

__device__ __forceinline__ void store_vec(T* p, const float (&f)[VEC])
{
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int j = 0; j < VEC; ++j)
        e[j] = T(f[j]);
    *reinterpret_cast<uint4*>(p) = raw;
}

template <bool MAX>
__device__ __forceinline__ float warp_reduce(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float other = __shfl_xor(v, o, 32);
        v = MAX ? fmaxf(v, other) : v + other;
    }
    return v;
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
softmax_vec(const T* __restrict__ x, T* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red_max[WARPS], red_sum[WARPS];
    const size_t base = (size_t)blockIdx.x * COLS;
    const T* xr = x + base;
    T* yr = y + base;
    // Layout of this row: [0, head) scalar, [head, tail) aligned vectors, [tail, COLS) scalar (< VEC each).
    const int head = min((int)((VEC - base % VEC) % VEC), COLS);
    const int nvec = (COLS - head) / VEC, tail = head + nvec * VEC;
    const int tid = threadIdx.x;
    // The head and tail columns (at most 2 * (VEC - 1)) go to the first threads, one each.
    const bool has_edge = tid < head + (COLS - tail);
    const int edge = tid < head ? tid : tail + (tid - head);
    const T* xv = xr + head;

    float m = has_edge ? static_cast<float>(xr[edge]) : LOWEST;
#pragma unroll 4
    for (int i = tid; i < nvec; i += BLOCK) {
        float f[VEC];
        load_vec(xv + (size_t)i * VEC, f);
#pragma unroll
        for (int j = 0; j < VEC; ++j)
            m = fmaxf(m, f[j]);
    }
    m = block_reduce<true>(m, red_max);

    float s = has_edge ? exp2f((static_cast<float>(xr[edge]) - m) * LOG2E) : 0.0f;
#pragma unroll 4
    for (int i = tid; i < nvec; i += BLOCK) {
        float f[VEC];
        load_vec(xv + (size_t)i * VEC, f);
#pragma unroll
        for (int j = 0; j < VEC; ++j)
            s += exp2f((f[j] - m) * LOG2E);
    }
    const float inv = 1.0f / block_reduce<false>(s, red_sum);

    if (has_edge)
        yr[edge] = T(exp2f((static_cast<float>(xr[edge]) - m) * LOG2E) * inv);
#pragma unroll 4
    for (int i = tid; i < nvec; i += BLOCK) {
        float f[VEC];
        load_vec(xv + (size_t)i * VEC, f);
#pragma unroll
        for (int j = 0; j < VEC; ++j)
            f[j] = exp2f((f[j] - m) * LOG2E) * inv;
        store_vec(yr + head + (size_t)i * VEC, f);
    }
}
