// Step 3, vectorized-row-access: 16-byte loads (4 floats or 8 halves), UNROLL of them issued per thread before
// any is added (8 x 16 bytes in flight per thread at the defaults: a 256-thread block keeps a whole 32 KB row
// in flight). Row r starts at element r * COLS, 16-byte aligned only when (r * COLS) % VEC == 0: each row is a
// scalar head (up to VEC - 1 elements before the first aligned address), aligned vectors and a scalar tail, so
// every row takes the vector path. Block reduce as step 2. x is read once. Any ROWS, COLS >= 1.
// peak: entry=row_sum_vec grid=(ROWS, 1, 1) block=(BLOCK, 1, 1) shared=0
// peak: params BLOCK=[256, 512, 128, 1024] UNROLL=[8, 4, 2, 16]
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef float T;  // the session's dtype: float, __half or __nv_bfloat16 (the only line to change)

#define WARPS (BLOCK / 32)
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

extern "C" __global__ void __launch_bounds__(BLOCK)
row_sum_vec(const T* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    const size_t base = (size_t)blockIdx.x * COLS;
    const T* xr = x + base;
    const int head = min((int)((VEC - base % VEC) % VEC), COLS);
    const int nvec = (COLS - head) / VEC, tail = head + nvec * VEC;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const bool has_edge = tid < head + (COLS - tail);  // scalar head and tail columns, one per thread
    const int edge = tid < head ? tid : tail + (tid - head);
    const uint4* xv = reinterpret_cast<const uint4*>(xr + head);

    float acc = has_edge ? static_cast<float>(xr[edge]) : 0.0f;
    for (int i0 = tid; i0 < nvec; i0 += BLOCK * UNROLL) {
        uint4 raw[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)  // every load of the batch first
            if (i0 + u * BLOCK < nvec)
                raw[u] = xv[i0 + u * BLOCK];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            if (i0 + u * BLOCK < nvec)
                acc += vec_sum(raw[u]);
    }
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
