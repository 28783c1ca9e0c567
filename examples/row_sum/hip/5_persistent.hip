// HIP spelling of examples/row_sum/cuda/5_persistent.cu: the same kernel with HIP's headers and types and HIP's
// mask-free __shfl_xor(v, o, 32). Reductions run over 32-lane groups (width 32), so results are the same
// on NVIDIA's 32-lane warps and AMD's 64-lane waves, and the launch geometry does not depend on warpSize.
// Step 5, persistent-rows: step 3's body in a loop over rows. GRID blocks (a multiple of the SM count: 132 on an
// H100 SXM, so 528 is 4 blocks per SM; pick multiples of your device's count) take rows blockIdx.x,
// blockIdx.x + gridDim.x, ...: no block launch per row and no partial last wave. The shared partials are
// double-buffered by row parity, so a warp that runs ahead into the next row never overwrites partials warp 0
// is still reading. Any ROWS, COLS >= 1.
// peak: entry=row_sum_persistent grid=(min(ROWS, GRID), 1, 1) block=(BLOCK, 1, 1) shared=0
// peak: params BLOCK=[256, 512, 128, 1024] UNROLL=[8, 4, 2, 16] GRID=[528, 264, 396, 792, 1056]
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bfloat16.h>

typedef float T;  // the session's dtype: float, __half or hip_bfloat16 (the only line to change)

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
        v += __shfl_xor(v, o, 32);
    return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
row_sum_persistent(const T* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[2][WARPS];
    for (int row = blockIdx.x, parity = 0; row < ROWS; row += gridDim.x, parity ^= 1) {
        const size_t base = (size_t)row * COLS;
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
            red[parity][warp] = acc;
        __syncthreads();
        if (warp == 0) {
            acc = warp_sum(lane < WARPS ? red[parity][lane] : 0.0f);
            if (lane == 0)
                y[row] = acc;
        }
    }
}
