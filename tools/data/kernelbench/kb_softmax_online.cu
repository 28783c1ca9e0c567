// The online-softmax example (examples/softmax/cuda/4_online_registers.cu) in the ABI of a KernelBench softmax
// file (tools/data/kernelbench/kb_softmax.py): its size symbols are the module's batch_size and dim.
// Step 4, online-softmax: one pass over x yields each thread's (max m, sum s of exp(x - m)); the block merges
// the pairs with the online rule (m = max(m1, m2), s = s1 * exp(m1 - m) + s2 * exp(m2 - m)), and one more pass
// writes y. When the row fits in registers (nvec <= VPT * BLOCK: DIM up to BLOCK * EPT elements, 8192 at the
// defaults) each thread keeps its VPT 16-byte vectors raw (4 or 8 values per 4 registers) from the load to the
// write: x is read from DRAM exactly once, and all VPT loads of a thread are issued before any is used (32 KB
// in flight per block at the defaults). Longer rows take the same steps with a streaming online pass and a
// re-read of the row (an L2 hit while the row is recent). Vector body with a per-row alignment check and
// scalar head and tail, as in step 3. Any BATCH_SIZE, DIM >= 1.
// peak: entry=softmax_online grid=(BATCH_SIZE, 1, 1) block=(BLOCK, 1, 1) shared=0
// peak: params BLOCK=[256, 512, 128, 1024] EPT=[32, 16, 64, 8]
// peak: where=BLOCK * EPT <= 16384
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef float T;  // the session's dtype: float, __half or __nv_bfloat16 (the only line to change)

#define LOG2E 1.4426950408889634f
#define LOWEST (-3.402823466e38f)  // -FLT_MAX: merging two empty partials gives 0 * exp2(0), never NaN
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

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_online(const T* __restrict__ x, T* __restrict__ y, int BATCH_SIZE, int DIM)
{
    __shared__ float red_m[WARPS], red_s[WARPS];
    const size_t base = (size_t)blockIdx.x * DIM;
    const T* xr = x + base;
    T* yr = y + base;
    const int head = min((int)((VEC - base % VEC) % VEC), DIM);
    const int nvec = (DIM - head) / VEC, tail = head + nvec * VEC;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const bool has_edge = tid < head + (DIM - tail);  // scalar head and tail columns, one per thread
    const int edge = tid < head ? tid : tail + (tid - head);
    const uint4* xv = reinterpret_cast<const uint4*>(xr + head);
    uint4* yv = reinterpret_cast<uint4*>(yr + head);
    const bool fits = nvec <= VPT * BLOCK;  // uniform over the block

    float m = LOWEST, s = 0.0f;
    const float xe = has_edge ? static_cast<float>(xr[edge]) : LOWEST;
    if (has_edge) {
        m = xe;
        s = 1.0f;
    }
    uint4 raw[VPT];
    if (fits) {
#pragma unroll
        for (int k = 0; k < VPT; ++k)  // every load first: VPT x 16 bytes in flight per thread
            if (tid + k * BLOCK < nvec)
                raw[k] = xv[tid + k * BLOCK];
        float mt = m;  // the row is in registers: this thread's max first, then one exp per element
#pragma unroll
        for (int k = 0; k < VPT; ++k)
            if (tid + k * BLOCK < nvec) {
                float f[VEC];
                unpack(raw[k], f);
#pragma unroll
                for (int j = 0; j < VEC; ++j)
                    mt = fmaxf(mt, f[j]);
            }
        s *= exp2f((m - mt) * LOG2E);
#pragma unroll
        for (int k = 0; k < VPT; ++k)
            if (tid + k * BLOCK < nvec) {
                float f[VEC];
                unpack(raw[k], f);
#pragma unroll
                for (int j = 0; j < VEC; ++j)
                    s += exp2f((f[j] - mt) * LOG2E);
            }
        m = mt;
    } else {
#pragma unroll 4
        for (int i = tid; i < nvec; i += BLOCK) {
            float f[VEC];
            unpack(xv[i], f);
            online(m, s, f);
        }
    }
    // Block merge: warp butterflies, one shared exchange, every warp merges the partials in the same order.
    warp_merge(m, s);
    if (lane == 0) {
        red_m[warp] = m;
        red_s[warp] = s;
    }
    __syncthreads();
    m = lane < WARPS ? red_m[lane] : LOWEST;
    s = lane < WARPS ? red_s[lane] : 0.0f;
    warp_merge(m, s);
    const float inv = 1.0f / s;

    if (has_edge)
        yr[edge] = T(exp2f((xe - m) * LOG2E) * inv);
    if (fits) {
#pragma unroll
        for (int k = 0; k < VPT; ++k)
            if (tid + k * BLOCK < nvec) {
                float f[VEC];
                unpack(raw[k], f);
#pragma unroll
                for (int j = 0; j < VEC; ++j)
                    f[j] = exp2f((f[j] - m) * LOG2E) * inv;
                yv[tid + k * BLOCK] = pack(f);
            }
    } else {
#pragma unroll 4
        for (int i = tid; i < nvec; i += BLOCK) {
            float f[VEC];
            unpack(xv[i], f);
#pragma unroll
            for (int j = 0; j < VEC; ++j)
                f[j] = exp2f((f[j] - m) * LOG2E) * inv;
            yv[i] = pack(f);
        }
    }
}
