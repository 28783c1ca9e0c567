// Naive attention forward: one thread per query row. A first pass over the keys finds the row's max score m and
// l = sum exp(s - m) (online: l rescaled when m grows); then, 32 output columns at a time, a pass recomputes each
// score and sums exp(s - m) v into registers. Scores are never stored; any D; CAUSAL=1 stops at key i.
// peak: entry=attention grid=(cdiv(S, 128), H, B) block=(128, 1, 1) shared=0
#define COLS_PER_PASS 32
extern "C" __global__ void attention(const T* q, const T* k, const T* v, T* o, int B, int H, int S, int D,
                                     int CAUSAL)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= S) return;
    long long head = ((long long)blockIdx.z * H + blockIdx.y) * S * D;
    const T* qi = q + head + (long long)i * D;
    const T* kh = k + head;
    const T* vh = v + head;
    T* oi = o + head + (long long)i * D;
    float scale = 1.0f / sqrtf((float)D);
    int n = CAUSAL ? i + 1 : S;
    float m = -3.402823466e38f, l = 0.0f;
    for (int j = 0; j < n; ++j) {
        float s = 0.0f;
        for (int d = 0; d < D; ++d)
            s += to_f32(qi[d]) * to_f32(kh[(long long)j * D + d]);
        s *= scale;
        if (s > m) { l *= expf(m - s); m = s; }
        l += expf(s - m);
    }
    for (int d0 = 0; d0 < D; d0 += COLS_PER_PASS) {
        float acc[COLS_PER_PASS];
        for (int c = 0; c < COLS_PER_PASS; ++c) acc[c] = 0.0f;
        for (int j = 0; j < n; ++j) {
            float s = 0.0f;
            for (int d = 0; d < D; ++d)
                s += to_f32(qi[d]) * to_f32(kh[(long long)j * D + d]);
            float p = expf(s * scale - m);
            #pragma unroll
            for (int c = 0; c < COLS_PER_PASS; ++c)
                if (d0 + c < D) acc[c] += p * to_f32(vh[(long long)j * D + d0 + c]);
        }
        #pragma unroll
        for (int c = 0; c < COLS_PER_PASS; ++c)
            if (d0 + c < D) oi[d0 + c] = from_f32(acc[c] / l);
    }
}
