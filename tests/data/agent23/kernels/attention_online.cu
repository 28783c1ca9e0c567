// dtype bf16: T is the storage type, to_f32 reads an element, from_f32 rounds a float to T
#include <cuda_bf16.h>
typedef __nv_bfloat16 T;
__device__ __forceinline__ float to_f32(T v) { return __bfloat162float(v); }
__device__ __forceinline__ T from_f32(float v) { return __float2bfloat16_rn(v); }
// attention-online-tiling: a block of 128 threads takes BM = 64 query rows of one head; two threads share a row,
// each with half of q (pre-scaled by 1/sqrt(D)) and half of the output accumulator in registers (DH = 64 floats:
// D <= 128), the dot product completed with __shfl_xor_sync(.., 1). K and V tiles of BN = 64 keys in shared
// memory (f32). D > 128 takes the general path (one thread per row, two passes) in the same file.
// peak: entry=attn grid=(cdiv(S, 64), H, B) block=(128, 1, 1) shared=0
#define BM 64
#define BN 32
#define DH 64
#define FLT_LOWEST -3.402823466e38f  // -FLT_MAX: NVRTC has no <cfloat>
__device__ float dot_row(const T* a, const T* b, int D) {
    float s = 0.0f;
    for (int d = 0; d < D; ++d) s += to_f32(a[d]) * to_f32(b[d]);
    return s;
}

extern "C" __global__ void __launch_bounds__(128) attn(const T* q, const T* k, const T* v, T* o, int B, int H, int S,
                                                       int D, int CAUSAL)
{
    __shared__ float Ks[BN][2 * DH], Vs[BN][2 * DH];
    const long long head = (long long)blockIdx.z * H + blockIdx.y;
    const T* kh = k + head * S * D;
    const T* vh = v + head * S * D;
    const int i0 = blockIdx.x * BM, t = threadIdx.x;
    const float scale = rsqrtf((float)D);
    if (D > 2 * DH) {  // general path: uniform over the grid, no barrier split
        int i = i0 + t;
        if (t >= BM || i >= S) return;
        const T* qi = q + (head * S + i) * D;
        T* oi = o + (head * S + i) * D;
        int last = CAUSAL ? i + 1 : S;
        float m = FLT_LOWEST, l = 0.0f;
        for (int j = 0; j < last; ++j) {
            float s = dot_row(qi, kh + (long long)j * D, D) * scale, mn = fmaxf(m, s);
            l = l * __expf(m - mn) + __expf(s - mn);
            m = mn;
        }
        for (int d = 0; d < D; ++d) {  // o written once per element: recompute p per column (slow, general)
            float acc = 0.0f;
            for (int j = 0; j < last; ++j)
                acc += __expf(dot_row(qi, kh + (long long)j * D, D) * scale - m) * to_f32(vh[(long long)j * D + d]);
            oi[d] = from_f32(acc / l);
        }
        return;
    }
    const int r = t / 2, half = t % 2, i = i0 + r;
    const bool live = i < S;  // rows past S take part in the barriers; only their stores are skipped
    float qr[DH], acc[DH];
#pragma unroll
    for (int d = 0; d < DH; ++d) {
        int dd = half * DH + d;
        qr[d] = (live && dd < D) ? to_f32(q[(head * S + i) * D + dd]) * scale : 0.0f;
        acc[d] = 0.0f;
    }
    float m = FLT_LOWEST, l = 0.0f;
    const int kend = CAUSAL ? min(S, i0 + BM) : S;
    for (int j0 = 0; j0 < kend; j0 += BN) {
        for (int e = t; e < BN * 2 * DH; e += 128) {
            int jj = e / (2 * DH), dd = e % (2 * DH);
            bool in = j0 + jj < S && dd < D;
            Ks[jj][dd] = in ? to_f32(kh[(long long)(j0 + jj) * D + dd]) : 0.0f;
            Vs[jj][dd] = in ? to_f32(vh[(long long)(j0 + jj) * D + dd]) : 0.0f;
        }
        __syncthreads();
        const int jn = min(BN, kend - j0);
        for (int jj = 0; jj < jn; ++jj) {
            float s = 0.0f;
#pragma unroll
            for (int d = 0; d < DH; ++d) s += qr[d] * Ks[jj][half * DH + d];
            s += __shfl_xor_sync(0xffffffffu, s, 1);  // every lane of the warp: before any mask
            if (!live || (CAUSAL && j0 + jj > i)) continue;
            if (s > m) {
                float a = __expf(m - s);
                l *= a;
#pragma unroll
                for (int d = 0; d < DH; ++d) acc[d] *= a;
                m = s;
            }
            float p = __expf(s - m);
            l += p;
#pragma unroll
            for (int d = 0; d < DH; ++d) acc[d] += p * Vs[jj][half * DH + d];
        }
        __syncthreads();
    }
    if (!live) return;
#pragma unroll
    for (int d = 0; d < DH; ++d) {
        int dd = half * DH + d;
        if (dd < D) o[(head * S + i) * D + dd] = from_f32(acc[d] / l);
    }
}
