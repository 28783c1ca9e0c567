// HOSTILE half_accumulate_pv: the naive kernel with the p v sums kept in half ("16-bit math is twice as fast"): an
// 11-bit accumulator over up to S terms in an f32 session.
// EXPECT: status=failed failure=wrong_result.
#include <cuda_fp16.h>
// peak: entry=attention grid=(cdiv(S, 128), H, B) block=(128, 1, 1) shared=0
#define COLS_PER_PASS 32
extern "C" __global__ void attention(const float* q, const float* k, const float* v, float* o, int B, int H, int S, int D,
                                     int CAUSAL)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= S) return;
    long long head = ((long long)blockIdx.z * H + blockIdx.y) * S * D;
    const float* qi = q + head + (long long)i * D;
    const float* kh = k + head;
    const float* vh = v + head;
    float* oi = o + head + (long long)i * D;
    float scale = 1.0f / sqrtf((float)D);
    int n = CAUSAL ? i + 1 : S;
    float m = -3.402823466e38f, l = 0.0f;
    for (int j = 0; j < n; ++j) {
        float s = 0.0f;
        for (int d = 0; d < D; ++d)
            s += (qi[d]) * (kh[(long long)j * D + d]);
        s *= scale;
        if (s > m) { l *= expf(m - s); m = s; }
        l += expf(s - m);
    }
    for (int d0 = 0; d0 < D; d0 += COLS_PER_PASS) {
        __half acc[COLS_PER_PASS];                     // BUG: 11-bit accumulator
        for (int c = 0; c < COLS_PER_PASS; ++c) acc[c] = __float2half(0.0f);
        for (int j = 0; j < n; ++j) {
            float s = 0.0f;
            for (int d = 0; d < D; ++d)
                s += (qi[d]) * (kh[(long long)j * D + d]);
            float p = expf(s * scale - m);
            #pragma unroll
            for (int c = 0; c < COLS_PER_PASS; ++c)
                if (d0 + c < D) acc[c] = __float2half(__half2float(acc[c]) + p * vh[(long long)j * D + d0 + c]);
        }
        #pragma unroll
        for (int c = 0; c < COLS_PER_PASS; ++c)
            if (d0 + c < D) oi[d0 + c] = (__half2float(acc[c]) / l);
    }
}
