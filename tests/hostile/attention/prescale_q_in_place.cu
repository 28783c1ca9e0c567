// HOSTILE prescale_q_in_place: folds the 1/sqrt(D) scale into q by scaling q in place before the scores (a common
// "free" optimisation): its output is right on the first launch, and q is left scaled, so the caller's input has
// changed (and a second launch with the same buffers scales again).
// EXPECT: status=failed failure=input_modified.
// peak: entry=attention grid=(cdiv(S, 64), H, B) block=(64, 1, 1) shared=0
#define COLS_PER_PASS 32
extern "C" __global__ void attention(float* q, const float* k, const float* v, float* o, int B, int H, int S, int D,
                                     int CAUSAL)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= S) return;
    long long head = ((long long)blockIdx.z * H + blockIdx.y) * S * D;
    float* qi = q + head + (long long)i * D;
    const float* kh = k + head;
    const float* vh = v + head;
    float* oi = o + head + (long long)i * D;
    float scale = 1.0f / sqrtf((float)D);
    for (int d = 0; d < D; ++d)
        qi[d] *= scale;                                  // BUG: the input is written (each thread owns its row)
    int n = CAUSAL ? i + 1 : S;
    float m = -3.402823466e38f, l = 0.0f;
    for (int j = 0; j < n; ++j) {
        float s = 0.0f;
        for (int d = 0; d < D; ++d)
            s += qi[d] * kh[(long long)j * D + d];
        if (s > m) { l *= expf(m - s); m = s; }
        l += expf(s - m);
    }
    for (int d0 = 0; d0 < D; d0 += COLS_PER_PASS) {
        float acc[COLS_PER_PASS];
        for (int c = 0; c < COLS_PER_PASS; ++c) acc[c] = 0.0f;
        for (int j = 0; j < n; ++j) {
            float s = 0.0f;
            for (int d = 0; d < D; ++d)
                s += qi[d] * kh[(long long)j * D + d];
            float p = expf(s - m);
            #pragma unroll
            for (int c = 0; c < COLS_PER_PASS; ++c)
                if (d0 + c < D) acc[c] += p * vh[(long long)j * D + d0 + c];
        }
        #pragma unroll
        for (int c = 0; c < COLS_PER_PASS; ++c)
            if (d0 + c < D) oi[d0 + c] = acc[c] / l;
    }
}
