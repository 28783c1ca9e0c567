// HIP spelling of examples/softmax/cuda/9_bulk_pipeline.cu, its generic path alone: HIP has no spelling of
// Hopper's bulk asynchronous copy and mbarrier transaction counts, and AMD's 64 KB of LDS would not take the CUDA
// step's shared-memory request, so this twin keeps the ladder's step with the CUDA kernel's fallback on every
// device: persistent blocks (step 6) reading each row twice from global memory (the second pass from L2), 16-byte
// accesses where x and y share their alignment, scalar head and tail, exp2((x - max) log2 e) / sum in the second pass.
// HIP's mask-free __shfl_xor(v, o, 32): reductions run over 32-lane groups, so results are the same on 32-lane
// warps and 64-lane waves. On NVIDIA use the CUDA step. Not timed here. Any ROWS, COLS >= 1.
// peak: entry=softmax_bulk grid=(min(ROWS, GRID), 1, 1) block=(BLOCK, 1, 1) shared=0
// peak: params GRID=[528, 264, 1056] BLOCK=[256, 512, 1024]
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bfloat16.h>

typedef float T;  // the session's dtype: float, __half or hip_bfloat16 (the only line to change)

#define LOG2E 1.4426950408889634f
#define LOWEST (-3.402823466e38f)  // -FLT_MAX: merging two empty partials gives 0 * exp2(0), never NaN
#define WARPS (BLOCK / 32)
#define VEC ((int)(16 / sizeof(T)))  // elements per 16-byte access: 4 floats or 8 halves

// 2^x in one instruction, denormal results flushed to 0 (2^-inf = 0: the merge of an empty partial stays finite).
__device__ __forceinline__ float exp2_ftz(float x)
{
#if defined(__HIP_PLATFORM_AMD__)
    // AMD: exp2f keeps denormal results too (a compare, two selects, an add and a multiply around v_exp_f32);
    // v_exp_f32 alone flushes them
#if __has_builtin(__builtin_amdgcn_exp2f)
    return __builtin_amdgcn_exp2f(x);  // clang 17 and later
#else
    float y;
    asm("v_exp_f32 %0, %1" : "=v"(y) : "v"(x));
    return y;
#endif
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#endif
}

__device__ __forceinline__ void unpack(const uint4& raw, float (&f)[VEC])
{
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < VEC; ++j)
        f[j] = static_cast<float>(e[j]);
}

__device__ __forceinline__ uint4 pack(const float (&f)[VEC])
{
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int j = 0; j < VEC; ++j)
        e[j] = T(f[j]);
    return raw;
}

// Online softmax: fold VEC values into (m, s).
__device__ __forceinline__ void online(float& m, float& s, const float (&f)[VEC])
{
    float mv = f[0];
#pragma unroll
    for (int j = 1; j < VEC; ++j)
        mv = fmaxf(mv, f[j]);
    const float mn = fmaxf(m, mv);
    float add = 0.0f;
#pragma unroll
    for (int j = 0; j < VEC; ++j)
        add += exp2_ftz((f[j] - mn) * LOG2E);
    s = s * exp2_ftz((m - mn) * LOG2E) + add;
    m = mn;
}

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2)
{
    const float mn = fmaxf(m, m2);
    s = s * exp2_ftz((m - mn) * LOG2E) + s2 * exp2_ftz((m2 - mn) * LOG2E);  // symmetric: same bits in both lanes
    m = mn;
}

__device__ __forceinline__ void warp_merge(float& m, float& s)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor(m, o, 32), s2 = __shfl_xor(s, o, 32);
        merge(m, s, m2, s2);
    }
}

// The block's (max, sum) of row k: one barrier, partials double-buffered by row parity (see step 6); every warp
// merges the partials in the same order, so every thread holds the same bits.
__device__ __forceinline__ void block_merge(float& m, float& s, float (*red)[32], int k)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    warp_merge(m, s);
    if (lane == 0) {
        red[2 * (k & 1)][warp] = m;
        red[2 * (k & 1) + 1][warp] = s;
    }
    __syncthreads();
    m = lane < WARPS ? red[2 * (k & 1)][lane] : LOWEST;
    s = lane < WARPS ? red[2 * (k & 1) + 1][lane] : 0.0f;
    warp_merge(m, s);
}


// y for one vector: exp2((x - m) log2 e) / s.
__device__ __forceinline__ uint4 probabilities(const uint4& raw, float m, float inv)
{
    float f[VEC];
    unpack(raw, f);
#pragma unroll
    for (int j = 0; j < VEC; ++j)
        f[j] = exp2_ftz((f[j] - m) * LOG2E) * inv;
    return pack(f);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_bulk(const T* __restrict__ x, T* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[4][32];  // [2 parity + 0]: maxima, [2 parity + 1]: sums
    const int tid = threadIdx.x;
    // Generic path: online max and sum over the row from global memory, then the writing pass (from L2), 16-byte
    // accesses where x and y share their alignment.
    const bool vec = ((reinterpret_cast<size_t>(x) ^ reinterpret_cast<size_t>(y)) & 15) == 0;
    int k = 0;
    for (long long row = blockIdx.x; row < ROWS; row += gridDim.x, ++k) {
        const T* xr = x + row * COLS;
        T* yr = y + row * COLS;
        const int head = vec ? (int)min((size_t)((16 - (reinterpret_cast<size_t>(xr) & 15)) & 15) / sizeof(T),
                                        (size_t)COLS) : COLS;
        const int nvec = (COLS - head) / VEC, tail = head + nvec * VEC;
        const uint4* xv = reinterpret_cast<const uint4*>(xr + head);
        uint4* yv = reinterpret_cast<uint4*>(yr + head);
        float m = LOWEST, sum = 0.0f;
        for (int c = tid; c < head; c += BLOCK)
            merge(m, sum, static_cast<float>(xr[c]), 1.0f);
#pragma unroll 4
        for (int i = tid; i < nvec; i += BLOCK) {
            float f[VEC];
            unpack(xv[i], f);
            online(m, sum, f);
        }
        for (int c = tail + tid; c < COLS; c += BLOCK)
            merge(m, sum, static_cast<float>(xr[c]), 1.0f);
        block_merge(m, sum, red, k);
        const float inv = 1.0f / sum;
        for (int c = tid; c < head; c += BLOCK)
            yr[c] = T(exp2_ftz((static_cast<float>(xr[c]) - m) * LOG2E) * inv);
#pragma unroll 4
        for (int i = tid; i < nvec; i += BLOCK)
            yv[i] = probabilities(xv[i], m, inv);
        for (int c = tail + tid; c < COLS; c += BLOCK)
            yr[c] = T(exp2_ftz((static_cast<float>(xr[c]) - m) * LOG2E) * inv);
    }
}
