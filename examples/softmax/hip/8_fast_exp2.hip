// HIP spelling of examples/softmax/cuda/8_fast_exp2.cu: step 7's HIP twin with its exp2 the same way on NVIDIA
// (inline PTX), and v_exp_f32 alone on AMD (compiled for gfx90a; not timed on AMD hardware here).
// Step 8, fast-exp2: step 7 with every exp2f replaced by one MUFU.EX2 that flushes denormals
// (ex2.approx.ftz.f32). Compiled without -ftz, as the server compiles, exp2f is a compare, two multiplies and the
// MUFU around each call, so that results below 2^-126 stay denormal: softmax spends about 35% more instructions
// (2,008 against 1,488 in this step's SASS at bf16, NVRTC 13.5) on terms that no tolerance can see (a term below 2^-126 of a row
// sum of at least 1). Same accuracy otherwise (ex2.approx: 2 ulp, as exp2f). On an H200 at 8192 x 8192 bf16 the
// instruction stream had become the limit: step 7 ran at 0.078 ms as the server compiles it and 0.067 ms with
// the flush (tools/bench_rows.py's harness, both compiles timed in one process).
// peak: entry=softmax_fast_exp2 grid=(ROWS, 1, 1) block=(BLOCK, 1, 1) shared=0
// peak: params BLOCK=[256, 512, 1024, 128] EPT=[32, 16, 8, 64] HINT=[0, 2, 1]
// peak: where=BLOCK * EPT <= 16384
// peak: where=BLOCK * EPT >= min(COLS, 8192)
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bfloat16.h>

typedef float T;  // the session's dtype: float, __half or hip_bfloat16 (the only line to change)

#define LOG2E 1.4426950408889634f
#define LOWEST (-3.402823466e38f)  // -FLT_MAX: merging two empty partials gives 0 * exp2(0), never NaN
#define WARPS (BLOCK / 32)
#define VEC ((int)(16 / sizeof(T)))  // elements per 16-byte access: 4 floats or 8 halves
#define VPT (EPT / VEC)              // 16-byte vectors each thread keeps in registers

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

#if defined(__HIP_PLATFORM_AMD__)
// AMD: HIP's C++ has no L1/L2 eviction priorities; HINT=1 and HINT=2 both mark x's loads and y's stores
// nontemporal (__builtin_nontemporal_load / _store, streaming cache policy).
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
#endif

// x: read once. The load is plain asm (no side effects: the kernel never writes x), so the compiler may schedule
// it as an ordinary load; the store is asm volatile.
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

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_fast_exp2(const T* __restrict__ x, T* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red_m[WARPS], red_s[WARPS];
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
                raw[k] = load_once(xv + tid + k * BLOCK);
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
        s *= exp2_ftz((m - mt) * LOG2E);
#pragma unroll
        for (int k = 0; k < VPT; ++k)
            if (tid + k * BLOCK < nvec) {
                float f[VEC];
                unpack(raw[k], f);
#pragma unroll
                for (int j = 0; j < VEC; ++j)
                    s += exp2_ftz((f[j] - mt) * LOG2E);
            }
        m = mt;
    } else {
#pragma unroll 4
        for (int i = tid; i < nvec; i += BLOCK) {  // plain loads: the writing pass finds the row in L2
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
        yr[edge] = T(exp2_ftz((xe - m) * LOG2E) * inv);
    if (fits) {
#pragma unroll
        for (int k = 0; k < VPT; ++k)
            if (tid + k * BLOCK < nvec) {
                float f[VEC];
                unpack(raw[k], f);
#pragma unroll
                for (int j = 0; j < VEC; ++j)
                    f[j] = exp2_ftz((f[j] - m) * LOG2E) * inv;
                store_once(yv + tid + k * BLOCK, pack(f));
            }
    } else {
#pragma unroll 4
        for (int i = tid; i < nvec; i += BLOCK) {
            float f[VEC];
            unpack(load_once(xv + i), f);  // the last use of x: evict-first
#pragma unroll
            for (int j = 0; j < VEC; ++j)
                f[j] = exp2_ftz((f[j] - m) * LOG2E) * inv;
            store_once(yv + i, pack(f));
        }
    }
}
