// HOSTILE race_missing_barrier: examples/rmsnorm/cuda/1_smem_tree.cu with the barrier inside the tree loop moved
// after it ("one barrier instead of eight"): step s reads red[tid + s], which another warp wrote in the step
// before - or has not written yet. The row's sum of squares, and every output of the row, depend on warp timing.
// EXPECT: status=failed, failure wrong_result / nondeterministic / nan_or_inf, or sanitizer_racecheck where
// compute-sanitizer runs.
// peak: entry=rmsnorm_tree grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
#define BLOCK 256
#define EPS 1e-6f

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_tree(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[BLOCK];
    const int tid = threadIdx.x;
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float* yr = y + (size_t)blockIdx.x * COLS;
    float ss = 0.0f;
    for (int c = tid; c < COLS; c += BLOCK)
        ss += xr[c] * xr[c];
    red[tid] = ss;
    __syncthreads();
#pragma unroll
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s)
            red[tid] += red[tid + s];
        // BUG: no __syncthreads() between the steps
    }
    __syncthreads();
    const float r = rsqrtf(red[0] / COLS + EPS);
    for (int c = tid; c < COLS; c += BLOCK)
        yr[c] = xr[c] * r * w[c];
}
