// Naive attention forward: one thread per query row, 64 output columns at a time: each pass walks the keys once,
// computing every score q . k_j / sqrt(D) and folding exp(s - m) v_j[cols] into registers with the online rule (a
// larger score m' rescales the sum l and the columns by exp(m - m')); o = columns / l. Scores are never stored;
// any D (cdiv(D, 64) passes); CAUSAL=1 stops at key i.
// peak: entry=attention grid=(cdiv(S, 128), H, B) block=(128, 1, 1) shared=0
#define COLS_PER_PASS 64
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
    for (int d0 = 0; d0 < D; d0 += COLS_PER_PASS) {
        float acc[COLS_PER_PASS];
        #pragma unroll
        for (int c = 0; c < COLS_PER_PASS; ++c) acc[c] = 0.0f;
        float m = -3.402823466e38f, l = 0.0f;
        for (int j = 0; j < n; ++j) {
            float s = 0.0f;
            for (int d = 0; d < D; ++d)
                s += to_f32(qi[d]) * to_f32(kh[(long long)j * D + d]);
            s *= scale;
            if (s > m) {
                float alpha = expf(m - s);
                l *= alpha;
                #pragma unroll
                for (int c = 0; c < COLS_PER_PASS; ++c) acc[c] *= alpha;
                m = s;
            }
            float p = expf(s - m);
            l += p;
            #pragma unroll
            for (int c = 0; c < COLS_PER_PASS; ++c)
                if (d0 + c < D) acc[c] += p * to_f32(vh[(long long)j * D + d0 + c]);
        }
        #pragma unroll
        for (int c = 0; c < COLS_PER_PASS; ++c)
            if (d0 + c < D) oi[d0 + c] = from_f32(acc[c] / l);
    }
}
