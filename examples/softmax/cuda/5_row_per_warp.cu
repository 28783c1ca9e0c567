// Step 5, row-per-warp: for short rows a whole block per row leaves most threads idle and pays a barrier per
// reduction. Here each warp owns one row (WARPS rows per block): the reductions are warp shuffles only, with
// no shared memory and no barrier, and a warp whose row is past ROWS leaves as a whole (every shuffle below
// has all 32 lanes). Body as step 4: online softmax, the row kept in registers when COLS <= 32 * EPT (1024 at
// the defaults), else a streaming online pass and a re-read; 16-byte vectors with a per-row alignment check.
// Best for COLS up to a few thousand; long rows belong to a block per row (step 4). Any ROWS, COLS >= 1.
// peak: entry=softmax_warp grid=(cdiv(ROWS, WARPS), 1, 1) block=(32 * WARPS, 1, 1) shared=0
// peak: params WARPS=[8, 4, 16] EPT=[32, 16, 64, 8]
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef float T;  // the session's dtype: float, __half or __nv_bfloat16 (the only line to change)

#define LOG2E 1.4426950408889634f
#define LOWEST (-3.402823466e38f)  // -FLT_MAX: merging two empty partials gives 0 * exp2(0), never NaN
#define VEC ((int)(16 / sizeof(T)))  // elements per 16-byte access: 4 floats or 8 halves
#define VPT (EPT / VEC)              // 16-byte vectors each lane keeps in registers

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
        add += exp2f((f[j] - mn) * LOG2E);
    s = s * exp2f((m - mn) * LOG2E) + add;
    m = mn;
}

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2)
{
    const float mn = fmaxf(m, m2);
    s = s * exp2f((m - mn) * LOG2E) + s2 * exp2f((m2 - mn) * LOG2E);  // symmetric: same bits in both lanes
    m = mn;
}

__device__ __forceinline__ void warp_merge(float& m, float& s)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        merge(m, s, m2, s2);
    }
}

extern "C" __global__ void __launch_bounds__(32 * WARPS)
softmax_warp(const T* __restrict__ x, T* __restrict__ y, int ROWS, int COLS)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * WARPS + threadIdx.x / 32;
    if (row >= ROWS)
        return;  // the whole warp: rows are per warp
    const size_t base = (size_t)row * COLS;
    const T* xr = x + base;
    T* yr = y + base;
    const int head = min((int)((VEC - base % VEC) % VEC), COLS);
    const int nvec = (COLS - head) / VEC, tail = head + nvec * VEC;
    const bool has_edge = lane < head + (COLS - tail);  // at most 14 scalar columns: one per lane
    const int edge = lane < head ? lane : tail + (lane - head);
    const uint4* xv = reinterpret_cast<const uint4*>(xr + head);
    uint4* yv = reinterpret_cast<uint4*>(yr + head);
    const bool fits = nvec <= VPT * 32;  // uniform over the warp

    float m = LOWEST, s = 0.0f;
    const float xe = has_edge ? static_cast<float>(xr[edge]) : LOWEST;
    if (has_edge) {
        m = xe;
        s = 1.0f;
    }
    uint4 raw[VPT];
    if (fits) {
#pragma unroll
        for (int k = 0; k < VPT; ++k)
            if (lane + k * 32 < nvec)
                raw[k] = xv[lane + k * 32];
        float mt = m;
#pragma unroll
        for (int k = 0; k < VPT; ++k)
            if (lane + k * 32 < nvec) {
                float f[VEC];
                unpack(raw[k], f);
#pragma unroll
                for (int j = 0; j < VEC; ++j)
                    mt = fmaxf(mt, f[j]);
            }
        s *= exp2f((m - mt) * LOG2E);
#pragma unroll
        for (int k = 0; k < VPT; ++k)
            if (lane + k * 32 < nvec) {
                float f[VEC];
                unpack(raw[k], f);
#pragma unroll
                for (int j = 0; j < VEC; ++j)
                    s += exp2f((f[j] - mt) * LOG2E);
            }
        m = mt;
    } else {
#pragma unroll 4
        for (int i = lane; i < nvec; i += 32) {
            float f[VEC];
            unpack(xv[i], f);
            online(m, s, f);
        }
    }
    warp_merge(m, s);
    const float inv = 1.0f / s;

    if (has_edge)
        yr[edge] = T(exp2f((xe - m) * LOG2E) * inv);
    if (fits) {
#pragma unroll
        for (int k = 0; k < VPT; ++k)
            if (lane + k * 32 < nvec) {
                float f[VEC];
                unpack(raw[k], f);
#pragma unroll
                for (int j = 0; j < VEC; ++j)
                    f[j] = exp2f((f[j] - m) * LOG2E) * inv;
                yv[lane + k * 32] = pack(f);
            }
    } else {
#pragma unroll 4
        for (int i = lane; i < nvec; i += 32) {
            float f[VEC];
            unpack(xv[i], f);
#pragma unroll
            for (int j = 0; j < VEC; ++j)
                f[j] = exp2f((f[j] - m) * LOG2E) * inv;
            yv[i] = pack(f);
        }
    }
}
