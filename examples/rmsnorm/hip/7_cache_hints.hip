// HIP spelling of examples/rmsnorm/cuda/7_cache_hints.cu: the same kernel with HIP's headers and types and HIP's
// mask-free __shfl_xor(v, o, 32), and on AMD nontemporal loads and stores in place of NVIDIA's cache hints.
// Reductions run over 32-lane groups (width 32), so results are the same on NVIDIA's 32-lane warps and AMD's
// 64-lane waves, and the launch geometry does not depend on warpSize.
// Step 7, cache-eviction-hints: step 4 (the row in registers, x read from DRAM once, every load of x issued before
// any is used) with each 16-byte global access marked by how often its data is used, and w read 16 bytes at a time.
// - x is read once. HINT=2: ld.global.nc.L1::no_allocate.L2::cache_hint under an L2 evict_first policy (the row
//   passes L1 by, and its lines are the first the L2 gives up); HINT=1: ld.global.cs (__ldcs, evict-first).
// - y is written once. HINT=2: st.global.L1::no_allocate.L2::cache_hint (evict_first); HINT=1: st.global.cs.
// - w is read by every row. HINT=2: L1::evict_last under an L2 evict_last policy, so the streaming x does not push
//   it out of L1; HINT=1 and 0: the read-only path (__ldg).
// - HINT=0: plain accesses, the baseline inside the same space. (sm_90 takes an L2 priority on a 16-byte access
//   only through a createpolicy operand: a bare .L2::evict_first needs 32-byte accesses.)
// w: step 4 reads it in its store loop through a plain pointer, and the compiler merges the vector and scalar
// branches into scalar loads (4 or 8 per 16 bytes); here aligned rows read it as 16-byte loads, which a hint or
// __ldg keeps whole. WPRE=1 issues those loads with x's (before the reduction: more registers, no w latency after
// the barrier); WPRE=0 loads each vector just before its use (the fewest registers; with HINT=2 they hit L1).
// Rows longer than BLOCK * EPT stream x twice, the first pass plain so that the second (evict-first) finds the row
// in L2. Any ROWS, COLS >= 1.
// Defaults as in the CUDA version, the H100's best at 8192 x 8192 (tools/bench_rows.py; not measured on AMD):
// HINT=0, since HINT=2 and HINT=1 ran about 1% slower in every case there; WPRE=1.
// peak: entry=rmsnorm_hints grid=(ROWS, 1, 1) block=(BLOCK, 1, 1) shared=0
// peak: params BLOCK=[256, 512, 1024, 128] EPT=[32, 16, 8, 64] WPRE=[1, 0] HINT=[0, 2, 1]
// peak: where=BLOCK * EPT <= 16384
// peak: where=BLOCK * EPT >= min(COLS, 8192)
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bfloat16.h>

typedef float T;  // the session's dtype: float, __half or hip_bfloat16 (the only line to change)

#define EPS 1e-6f
#define WARPS (BLOCK / 32)
#define VEC ((int)(16 / sizeof(T)))  // elements per 16-byte access: 4 floats or 8 halves
#define VPT (EPT / VEC)              // 16-byte vectors each thread keeps in registers
#if defined(__HIP_PLATFORM_AMD__)
// AMD: HIP's C++ has no L1/L2 eviction priorities; HINT=1 and HINT=2 both mark x's loads and y's stores
// nontemporal (__builtin_nontemporal_load / _store, streaming cache policy), and w is read plainly.
// Not timed on AMD hardware here.
typedef unsigned int u32x4 __attribute__((ext_vector_type(4)));

__device__ __forceinline__ uint4 load_once(const uint4* p)
{
#if HINT
    const u32x4 v = __builtin_nontemporal_load(reinterpret_cast<const u32x4*>(p));
    return make_uint4(v.x, v.y, v.z, v.w);
#else
    return *p;
#endif
}

__device__ __forceinline__ uint4 load_kept(const uint4* p)
{
    return *p;
}

__device__ __forceinline__ void store_once(uint4* p, const uint4& v)
{
#if HINT
    const u32x4 u = {v.x, v.y, v.z, v.w};
    __builtin_nontemporal_store(u, reinterpret_cast<u32x4*>(p));
#else
    *p = v;
#endif
}
#else  // NVIDIA: the CUDA kernel's accesses
#if HINT == 2 && (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800)
#define L2_POLICY 1  // createpolicy and .L2::cache_hint: sm_80 and newer; older devices get HINT=1's accesses
#else
#define L2_POLICY 0
#endif

#if L2_POLICY
__device__ __forceinline__ unsigned long long policy_evict_first()
{
    unsigned long long p;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}

__device__ __forceinline__ unsigned long long policy_evict_last()
{
    unsigned long long p;
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    return p;
}
#endif

// x: read once. Loads are plain asm (no side effects: x and w are not written by the kernel), so the compiler
// may schedule them as it would ordinary loads; stores are asm volatile.
__device__ __forceinline__ uint4 load_once(const uint4* p)
{
#if L2_POLICY
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(policy_evict_first()));
    return v;
#elif HINT
    return __ldcs(p);
#else
    return *p;
#endif
}

// w: read by every row.
__device__ __forceinline__ uint4 load_kept(const uint4* p)
{
#if L2_POLICY
    uint4 v;
    asm("ld.global.nc.L1::evict_last.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(policy_evict_last()));
    return v;
#else
    return __ldg(p);
#endif
}

// y: written once.
__device__ __forceinline__ void store_once(uint4* p, const uint4& v)
{
#if L2_POLICY
    asm volatile("st.global.L1::no_allocate.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;"
                 :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "l"(policy_evict_first()) : "memory");
#elif HINT
    __stcs(p, v);
#else
    *p = v;
#endif
}
#endif  // __HIP_PLATFORM_AMD__

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

// w at columns col .. col + VEC - 1: one 16-byte load where the row is aligned (then so is column col), else scalars.
__device__ __forceinline__ void weights(const T* __restrict__ w, int col, bool aligned, float (&g)[VEC])
{
    if (aligned) {
        unpack(load_kept(reinterpret_cast<const uint4*>(w + col)), g);
    } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j)
            g[j] = static_cast<float>(w[col + j]);
    }
}

__device__ __forceinline__ uint4 scale(const uint4& raw, const float (&g)[VEC], float r)
{
    float f[VEC];
    unpack(raw, f);
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
rmsnorm_hints(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int ROWS, int COLS)
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
    const uint4* wv = reinterpret_cast<const uint4*>(w);  // vector i of an aligned row: columns i * VEC ..
    const bool fits = nvec <= VPT * BLOCK, aligned = head == 0 && nvec > 0;  // uniform over the block
    const int last = max(nvec - 1, 0);  // w loads clamped to the row's vectors: unconditional, never past w's end

    const float xe = has_edge ? static_cast<float>(xr[edge]) : 0.0f;
    float ss = xe * xe;
    uint4 raw[VPT];
#if WPRE
    uint4 wraw[VPT];  // w's vectors, loaded with x: their latency passes under x's and the reduction's
#endif
    if (fits) {
#pragma unroll
        for (int k = 0; k < VPT; ++k)  // every load of x first: VPT 16-byte loads in flight per thread
            if (tid + k * BLOCK < nvec)
                raw[k] = load_once(xv + tid + k * BLOCK);
#if WPRE
        if (aligned) {
#pragma unroll
            for (int k = 0; k < VPT; ++k)
                wraw[k] = load_kept(wv + min(tid + k * BLOCK, last));
        }
#endif
#pragma unroll
        for (int k = 0; k < VPT; ++k)
            if (tid + k * BLOCK < nvec)
                ss += squares(raw[k]);
    } else {
#pragma unroll 4
        for (int i = tid; i < nvec; i += BLOCK)  // plain loads: the second pass finds the row in L2
            ss += squares(xv[i]);
    }
    ss = warp_sum(ss);
    if (lane == 0)
        red[warp] = ss;
    __syncthreads();
    const float r = rsqrtf(warp_sum(lane < WARPS ? red[lane] : 0.0f) / COLS + EPS);

    if (has_edge)
        yr[edge] = T(xe * r * static_cast<float>(w[edge]));
    if (fits && aligned) {
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const int i = tid + k * BLOCK;
#if WPRE
            const uint4 wk = wraw[k];
#else
            const uint4 wk = load_kept(wv + min(i, last));
#endif
            if (i < nvec) {
                float g[VEC];
                unpack(wk, g);
                store_once(yv + i, scale(raw[k], g, r));
            }
        }
    } else if (fits) {  // a misaligned row (head > 0): w one element at a time
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const int i = tid + k * BLOCK;
            if (i < nvec) {
                float g[VEC];
                weights(w, head + i * VEC, false, g);
                store_once(yv + i, scale(raw[k], g, r));
            }
        }
    } else {
#pragma unroll 2
        for (int i = tid; i < nvec; i += BLOCK) {
            float g[VEC];
            weights(w, head + i * VEC, head == 0, g);
            store_once(yv + i, scale(load_once(xv + i), g, r));  // the last use of x: evict-first
        }
    }
}
