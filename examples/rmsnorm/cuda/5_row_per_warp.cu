// Step 5, row-per-warp: for short rows a block per row leaves most threads idle and pays a barrier. Here each
// warp owns one row (WARPS rows per block): the reduction is warp shuffles only, no shared memory, no barrier;
// a warp whose row is past ROWS leaves as a whole (every shuffle has all 32 lanes). Body as step 4: the row in
// registers when COLS <= 32 * EPT (1024 at the defaults), else x streamed twice; 16-byte vectors with a per-row
// alignment check. Best for COLS up to a few thousand. Any ROWS, COLS >= 1.
// peak: entry=rmsnorm_warp grid=(cdiv(ROWS, WARPS), 1, 1) block=(32 * WARPS, 1, 1) shared=0
// peak: params WARPS=[8, 4, 16] EPT=[32, 16, 64, 8]
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef float T;  // the session's dtype: float, __half or __nv_bfloat16 (the only line to change)

#define EPS 1e-6f
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

// y for one vector: x * r * w, w as a vector where the row is aligned (then so is column `col` of w).
__device__ __forceinline__ uint4 scale(const uint4& raw, const T* __restrict__ w, int col, bool wvec, float r)
{
    float f[VEC], g[VEC];
    unpack(raw, f);
    if (wvec) {
        unpack(*reinterpret_cast<const uint4*>(w + col), g);
    } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j)
            g[j] = static_cast<float>(w[col + j]);
    }
#pragma unroll
    for (int j = 0; j < VEC; ++j)
        f[j] = f[j] * r * g[j];
    return pack(f);
}

__device__ __forceinline__ float squares(const uint4& raw)
{
    float f[VEC], s = 0.0f;
    unpack(raw, f);
#pragma unroll
    for (int j = 0; j < VEC; ++j)
        s += f[j] * f[j];
    return s;
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void __launch_bounds__(32 * WARPS)
rmsnorm_warp(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int ROWS, int COLS)
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
    const bool fits = nvec <= VPT * 32, wvec = head == 0;  // uniform over the warp

    const float xe = has_edge ? static_cast<float>(xr[edge]) : 0.0f;
    float ss = xe * xe;
    uint4 raw[VPT];
    if (fits) {
#pragma unroll
        for (int k = 0; k < VPT; ++k)  // every load first
            if (lane + k * 32 < nvec)
                raw[k] = xv[lane + k * 32];
#pragma unroll
        for (int k = 0; k < VPT; ++k)
            if (lane + k * 32 < nvec)
                ss += squares(raw[k]);
    } else {
#pragma unroll 4
        for (int i = lane; i < nvec; i += 32)
            ss += squares(xv[i]);
    }
    const float r = rsqrtf(warp_sum(ss) / COLS + EPS);

    if (has_edge)
        yr[edge] = T(xe * r * static_cast<float>(w[edge]));
    if (fits) {
#pragma unroll
        for (int k = 0; k < VPT; ++k)
            if (lane + k * 32 < nvec)
                yv[lane + k * 32] = scale(raw[k], w, head + (lane + k * 32) * VEC, wvec, r);
    } else {
#pragma unroll 4
        for (int i = lane; i < nvec; i += 32)
            yv[i] = scale(xv[i], w, head + i * VEC, wvec, r);
    }
}
