// Step 3, vectorized-row-access: step 2 with 16-byte loads and stores (4 floats or 8 halves per access). Row r
// starts at element r * COLS, 16-byte aligned only when (r * COLS) % VEC == 0: each row is split into a scalar
// head (up to VEC - 1 elements before the first aligned address), nvec aligned vectors and a scalar tail, so
// every row takes the vector path. w is read as vectors only where the row is aligned (head == 0: then column
// i * VEC is aligned in w too); on other rows the vector body reads w one element at a time (it stays in L1/L2).
// Two passes; the second re-reads x from L2. Any ROWS, COLS >= 1.
// peak: entry=rmsnorm_vec grid=(ROWS, 1, 1) block=(BLOCK, 1, 1) shared=0
// peak: params BLOCK=[256, 128, 512, 1024]
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef float T;  // the session's dtype: float, __half or __nv_bfloat16 (the only line to change)

#define EPS 1e-6f
#define WARPS (BLOCK / 32)
#define VEC ((int)(16 / sizeof(T)))  // elements per 16-byte access: 4 floats or 8 halves

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

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float block_sum(float v, float* red)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_sum(v);
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    return warp_sum(lane < WARPS ? red[lane] : 0.0f);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_vec(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    const size_t base = (size_t)blockIdx.x * COLS;
    const T* xr = x + base;
    T* yr = y + base;
    const int head = min((int)((VEC - base % VEC) % VEC), COLS);
    const int nvec = (COLS - head) / VEC, tail = head + nvec * VEC;
    const int tid = threadIdx.x;
    const bool has_edge = tid < head + (COLS - tail);  // scalar head and tail columns, one per thread
    const int edge = tid < head ? tid : tail + (tid - head);
    const uint4* xv = reinterpret_cast<const uint4*>(xr + head);
    uint4* yv = reinterpret_cast<uint4*>(yr + head);

    const float xe = has_edge ? static_cast<float>(xr[edge]) : 0.0f;
    float ss = xe * xe;
#pragma unroll 4
    for (int i = tid; i < nvec; i += BLOCK) {
        float f[VEC];
        unpack(xv[i], f);
#pragma unroll
        for (int j = 0; j < VEC; ++j)
            ss += f[j] * f[j];
    }
    const float r = rsqrtf(block_sum(ss, red) / COLS + EPS);

    if (has_edge)
        yr[edge] = T(xe * r * static_cast<float>(w[edge]));
    const bool wvec = head == 0;  // uniform over the block
#pragma unroll 4
    for (int i = tid; i < nvec; i += BLOCK) {
        float f[VEC], g[VEC];
        unpack(xv[i], f);
        if (wvec) {
            unpack(reinterpret_cast<const uint4*>(w)[i], g);
        } else {
#pragma unroll
            for (int j = 0; j < VEC; ++j)
                g[j] = static_cast<float>(w[head + i * VEC + j]);
        }
#pragma unroll
        for (int j = 0; j < VEC; ++j)
            f[j] = f[j] * r * g[j];
        yv[i] = pack(f);
    }
}
