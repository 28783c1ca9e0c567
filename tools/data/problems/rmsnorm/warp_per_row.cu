// RMS norm, one warp per row: the sum of squares with fmaf, reduced by shuffles; rsqrtf.
// peak: entry=rmsnorm_warp grid=(cdiv(ROWS, 4), 1, 1) block=(128, 1, 1) shared=0
extern "C" __global__ void rmsnorm_warp(const T* x, const T* w, T* y, int ROWS, int COLS)
{
    int row = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= ROWS) return;
    const T* in = x + (long long)row * COLS;
    T* out = y + (long long)row * COLS;
    float ss = 0.0f;
    for (int c = lane; c < COLS; c += 32) { float v = to_f32(in[c]); ss = fmaf(v, v, ss); }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    float r = rsqrtf(ss / (float)COLS + 1e-6f);
    for (int c = lane; c < COLS; c += 32) out[c] = from_f32(to_f32(in[c]) * r * to_f32(w[c]));
}
