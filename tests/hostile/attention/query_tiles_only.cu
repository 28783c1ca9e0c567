// HOSTILE query_tiles_only: the naive kernel with its grid rounded down to whole tiles of 64 query rows (grid
// S // 64): exact whenever S is a multiple of 64, and the last S % 64 query rows of every head are never written
// otherwise.
// EXPECT: status=not_general failure=generality_* (unaligned S: failed, unwritten_output).
// peak: entry=attention grid=(max(S // 64, 1), H, B) block=(64, 1, 1) shared=0
#define COLS_PER_PASS 32
extern "C" __global__ void attention(const float* q, const float* k, const float* v, float* o, int B, int H, int S,
                                     int D, int CAUSAL)
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
            s += qi[d] * kh[(long long)j * D + d];
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
                s += qi[d] * kh[(long long)j * D + d];
            float p = expf(s * scale - m);
            #pragma unroll
            for (int c = 0; c < COLS_PER_PASS; ++c)
                if (d0 + c < D) acc[c] += p * vh[(long long)j * D + d0 + c];
        }
        #pragma unroll
        for (int c = 0; c < COLS_PER_PASS; ++c)
            if (d0 + c < D) oi[d0 + c] = acc[c] / l;
    }
}
