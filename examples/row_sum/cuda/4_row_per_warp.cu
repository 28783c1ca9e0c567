// Step 4, row-per-warp: for short rows a block per row leaves most threads idle and pays a barrier. Each warp
// owns one row (WARPS rows per block): 16-byte loads, UNROLL per lane in flight, per-row alignment check with a
// scalar head and tail, a warp-shuffle reduction with no shared memory and no barrier; lane 0 writes y[row].
// A warp whose row is past ROWS leaves as a whole. Best for COLS up to a few thousand. Any ROWS, COLS >= 1.
// peak: entry=row_sum_warp grid=(cdiv(ROWS, WARPS), 1, 1) block=(32 * WARPS, 1, 1) shared=0
// peak: params WARPS=[8, 4, 16] UNROLL=[8, 4, 2, 16]
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef float T;  // the session's dtype: float, __half or __nv_bfloat16 (the only line to change)

#define VEC ((int)(16 / sizeof(T)))  // elements per 16-byte access: 4 floats or 8 halves

__device__ __forceinline__ float vec_sum(const uint4& raw)
{
    const T* e = reinterpret_cast<const T*>(&raw);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < VEC; ++j)
        s += static_cast<float>(e[j]);
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
row_sum_warp(const T* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * WARPS + threadIdx.x / 32;
    if (row >= ROWS)
        return;  // the whole warp: rows are per warp
    const size_t base = (size_t)row * COLS;
    const T* xr = x + base;
    const int head = min((int)((VEC - base % VEC) % VEC), COLS);
    const int nvec = (COLS - head) / VEC, tail = head + nvec * VEC;
    const bool has_edge = lane < head + (COLS - tail);  // at most 14 scalar columns: one per lane
    const int edge = lane < head ? lane : tail + (lane - head);
    const uint4* xv = reinterpret_cast<const uint4*>(xr + head);

    float acc = has_edge ? static_cast<float>(xr[edge]) : 0.0f;
    for (int i0 = lane; i0 < nvec; i0 += 32 * UNROLL) {
        uint4 raw[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            if (i0 + u * 32 < nvec)
                raw[u] = xv[i0 + u * 32];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            if (i0 + u * 32 < nvec)
                acc += vec_sum(raw[u]);
    }
    acc = warp_sum(acc);
    if (lane == 0)
        y[row] = acc;
}
