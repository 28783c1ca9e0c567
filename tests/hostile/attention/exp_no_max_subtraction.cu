// HOSTILE exp_no_max_subtraction: the naive kernel with exp(s) in place of exp(s - m): fine for small scores, but the stress
// trial's (q, k in (4, 8): scores of 36 sqrt(D) and more) overflow f32 past 88.
// EXPECT: status=failed failure=nan_or_inf.
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
        l += expf(s);                                            // BUG: no max subtracted
    }
    for (int d0 = 0; d0 < D; d0 += COLS_PER_PASS) {
        float acc[COLS_PER_PASS];
        for (int c = 0; c < COLS_PER_PASS; ++c) acc[c] = 0.0f;
        for (int j = 0; j < n; ++j) {
            float s = 0.0f;
            for (int d = 0; d < D; ++d)
                s += (qi[d]) * (kh[(long long)j * D + d]);
            float p = expf(s * scale);
            #pragma unroll
            for (int c = 0; c < COLS_PER_PASS; ++c)
                if (d0 + c < D) acc[c] += p * (vh[(long long)j * D + d0 + c]);
        }
        #pragma unroll
        for (int c = 0; c < COLS_PER_PASS; ++c)
            if (d0 + c < D) oi[d0 + c] = (acc[c] / l);
    }
}
