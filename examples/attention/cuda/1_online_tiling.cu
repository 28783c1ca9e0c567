// Step 1, online-softmax tiling: one pass over the keys, the S x S score matrix never written. A block takes BM=64
// query rows of one head; two threads share a row, each holding half of q and of the running output o (64 + 64
// floats) in registers. K and V come through shared memory in tiles of BN=64 keys; per key a thread's half dot
// product is completed with one shuffle, then the online rule: a larger score m' rescales o and l by
// exp(m - m'), and o += exp(s - m') v, l += exp(s - m'). o / l is written once. f32 FMAs (no tensor cores yet).
// D == 128 takes this path; any other D the per-row fallback (correct, slow).
// peak: entry=attention_online grid=(cdiv(S, 64), H, B) block=(128, 1, 1) shared=0
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef float T;  // the session's dtype: __nv_bfloat16 or __half (the only line to change; 16-bit only)
static_assert(sizeof(T) == 2, "the attention ladder takes f16 or bf16 sessions");

#define HD 128   // the head dimension of the fast path; any other D takes the per-row fallback below
#define BM 64    // query rows per block
#define LOWEST (-3.402823466e38f)

__device__ __forceinline__ float to_f(T x) { return static_cast<float>(x); }

// Any D (and what the fast path does not take): the naive kernel's algorithm, one thread per query row of this
// block's BM rows: a pass for the row max and sum, then 32 output columns per pass over the keys.
__device__ __noinline__ void fallback_rows(const T* q, const T* k, const T* v, T* o, int H, int S, int D,
                                          int CAUSAL)
{
    int i = blockIdx.x * BM + threadIdx.x;
    if (threadIdx.x >= BM || i >= S) return;
    long long head = ((long long)blockIdx.z * H + blockIdx.y) * S * D;
    const T* qi = q + head + (long long)i * D;
    const T* kh = k + head;
    const T* vh = v + head;
    T* oi = o + head + (long long)i * D;
    float scale = 1.0f / sqrtf((float)D);
    int n = CAUSAL ? i + 1 : S;
    float m = LOWEST, l = 0.0f;
    for (int j = 0; j < n; ++j) {
        float s = 0.0f;
        for (int d = 0; d < D; ++d) s += to_f(qi[d]) * to_f(kh[(long long)j * D + d]);
        s *= scale;
        if (s > m) { l *= expf(m - s); m = s; }
        l += expf(s - m);
    }
    for (int d0 = 0; d0 < D; d0 += 32) {
        float acc[32];
        #pragma unroll
        for (int c = 0; c < 32; ++c) acc[c] = 0.0f;
        for (int j = 0; j < n; ++j) {
            float s = 0.0f;
            for (int d = 0; d < D; ++d) s += to_f(qi[d]) * to_f(kh[(long long)j * D + d]);
            float p = expf(s * scale - m);
            #pragma unroll
            for (int c = 0; c < 32; ++c)
                if (d0 + c < D) acc[c] += p * to_f(vh[(long long)j * D + d0 + c]);
        }
        #pragma unroll
        for (int c = 0; c < 32; ++c)
            if (d0 + c < D) oi[d0 + c] = T(acc[c] / l);
    }
}

#define BN 64        // keys per shared-memory tile
#define HALF (HD / 2)

extern "C" __global__ void __launch_bounds__(128) attention_online(const T* q, const T* k, const T* v, T* o, int B,
                                                                   int H, int S, int D, int CAUSAL)
{
    if (D != HD) { fallback_rows(q, k, v, o, H, S, D, CAUSAL); return; }
    __shared__ __align__(16) T Ks[BN][HD];
    __shared__ __align__(16) T Vs[BN][HD];
    const long long head = ((long long)blockIdx.z * H + blockIdx.y) * S * HD;
    const int row = blockIdx.x * BM + (threadIdx.x >> 1);
    const int part = (threadIdx.x & 1) * HALF;  // which half of the head dimension this thread holds
    const bool live = row < S;
    const float scale = 1.0f / sqrtf((float)HD);
    float qr[HALF], acc[HALF];
    #pragma unroll
    for (int d = 0; d < HALF; ++d) {
        qr[d] = live ? to_f(q[head + (long long)row * HD + part + d]) * scale : 0.0f;
        acc[d] = 0.0f;
    }
    float m = LOWEST, l = 0.0f;
    const int last = S;  // every key tile, masked ones too (step 4 skips them)
    for (int key0 = 0; key0 < last; key0 += BN) {
        __syncthreads();  // the previous tile is no longer read
        for (int c = threadIdx.x; c < BN * HD / 8; c += blockDim.x) {
            int r = c / (HD / 8), col = (c % (HD / 8)) * 8;
            uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;
            if (key0 + r < S) {
                kv = *reinterpret_cast<const uint4*>(k + head + (long long)(key0 + r) * HD + col);
                vv = *reinterpret_cast<const uint4*>(v + head + (long long)(key0 + r) * HD + col);
            }
            *reinterpret_cast<uint4*>(&Ks[r][col]) = kv;
            *reinterpret_cast<uint4*>(&Vs[r][col]) = vv;
        }
        __syncthreads();
        const int n = min(BN, (CAUSAL ? min(row + 1, S) : S) - key0);  // this row's keys in the tile
        for (int j = 0; j < BN; ++j) {
            float s = 0.0f;
            #pragma unroll
            for (int d = 0; d < HALF; ++d) s += qr[d] * to_f(Ks[j][part + d]);
            s += __shfl_xor_sync(0xffffffffu, s, 1);
            if (j >= n) continue;  // masked (causal, or past S): both threads of the row skip together
            if (s > m) {
                float alpha = __expf(m - s);
                l *= alpha;
                #pragma unroll
                for (int d = 0; d < HALF; ++d) acc[d] *= alpha;
                m = s;
            }
            float p = __expf(s - m);
            l += p;
            #pragma unroll
            for (int d = 0; d < HALF; ++d) acc[d] += p * to_f(Vs[j][part + d]);
        }
    }
    if (!live) return;
    const float inv = 1.0f / l;
    #pragma unroll
    for (int d = 0; d < HALF; ++d) o[head + (long long)row * HD + part + d] = T(acc[d] * inv);
}
