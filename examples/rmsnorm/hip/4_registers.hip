// HIP spelling of examples/rmsnorm/cuda/4_registers.cu: the same kernel with HIP's headers and types and HIP's
// mask-free __shfl_xor(v, o, 32). Reductions run over 32-lane groups (width 32), so results are the same
// on NVIDIA's 32-lane warps and AMD's 64-lane waves, and the launch geometry does not depend on warpSize.
// Step 4, the row kept in registers: x is read from DRAM once. Each thread loads its VPT 16-byte vectors of the
// row (all loads issued before any is used: 32 KB in flight per block at the defaults), keeps them raw (4 or 8
// values per 4 registers) through the block reduction, and writes y from them. This covers rows up to
// BLOCK * EPT elements (8192 at the defaults); longer rows stream x twice (the second read mostly from L2).
// Vector body with a per-row alignment check, scalar head and tail; w is read as vectors where the row is
// aligned (head == 0), else one element at a time. Any ROWS, COLS >= 1.
// peak: entry=rmsnorm_regs grid=(ROWS, 1, 1) block=(BLOCK, 1, 1) shared=0
// peak: params BLOCK=[256, 512, 128, 1024] EPT=[32, 16, 64, 8]
// peak: where=BLOCK * EPT <= 16384
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bfloat16.h>

typedef float T;  // the session's dtype: float, __half or hip_bfloat16 (the only line to change)

#define EPS 1e-6f
#define WARPS (BLOCK / 32)
#define VEC ((int)(16 / sizeof(T)))  // elements per 16-byte access: 4 floats or 8 halves
#define VPT (EPT / VEC)              // 16-byte vectors each thread keeps in registers

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
        v += __shfl_xor(v, o, 32);
    return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_regs(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    const size_t base = (size_t)blockIdx.x * COLS;
    const T* xr = x + base;
    T* yr = y + base;
    const int head = min((int)((VEC - base % VEC) % VEC), COLS);
    const int nvec = (COLS - head) / VEC, tail = head + nvec * VEC;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const bool has_edge = tid < head + (COLS - tail);  // scalar head and tail columns, one per thread
    const int edge = tid < head ? tid : tail + (tid - head);
    const uint4* xv = reinterpret_cast<const uint4*>(xr + head);
    uint4* yv = reinterpret_cast<uint4*>(yr + head);
    const bool fits = nvec <= VPT * BLOCK, wvec = head == 0;  // uniform over the block

    const float xe = has_edge ? static_cast<float>(xr[edge]) : 0.0f;
    float ss = xe * xe;
    uint4 raw[VPT];
    if (fits) {
#pragma unroll
        for (int k = 0; k < VPT; ++k)  // every load first
            if (tid + k * BLOCK < nvec)
                raw[k] = xv[tid + k * BLOCK];
#pragma unroll
        for (int k = 0; k < VPT; ++k)
            if (tid + k * BLOCK < nvec)
                ss += squares(raw[k]);
    } else {
#pragma unroll 4
        for (int i = tid; i < nvec; i += BLOCK)
            ss += squares(xv[i]);
    }
    ss = warp_sum(ss);
    if (lane == 0)
        red[warp] = ss;
    __syncthreads();
    const float r = rsqrtf(warp_sum(lane < WARPS ? red[lane] : 0.0f) / COLS + EPS);

    if (has_edge)
        yr[edge] = T(xe * r * static_cast<float>(w[edge]));
    if (fits) {
#pragma unroll
        for (int k = 0; k < VPT; ++k)
            if (tid + k * BLOCK < nvec)
                yv[tid + k * BLOCK] = scale(raw[k], w, head + (tid + k * BLOCK) * VEC, wvec, r);
    } else {
#pragma unroll 4
        for (int i = tid; i < nvec; i += BLOCK)
            yv[i] = scale(xv[i], w, head + i * VEC, wvec, r);
    }
}
