// HOSTILE oob_read_before_far: a block-per-row RMS norm that reads its epsilon from a "parameter header" the author's
// framework kept 2 MiB before the weights: w[-2^19]. Nothing was allocated there for this caller, so eps is
// whatever those bytes hold (zeros would pass: eps is tiny beside mean(x^2)) or the read faults.
// EXPECT: status=failed (out_of_bounds_read, nan_or_inf or wrong_result from the value read; sanitizer_memcheck
// where compute-sanitizer runs and it did no harm) or error kernel_fault/worker_died if unmapped. Never
// benchmarked.
// peak: entry=rmsnorm_hdr grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
#define BLOCK 256
#define WARPS (BLOCK / 32)
#define EPS 1e-6f

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float block_sum(float v, float* red)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_sum(v);
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    return warp_sum(lane < WARPS ? red[lane] : 0.0f);
}
#define HEADER_BEFORE (1 << 19)                                  // floats: 2 MiB

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_hdr(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    const float eps = w[-HEADER_BEFORE];                         // BUG: no header was allocated before w
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float* yr = y + (size_t)blockIdx.x * COLS;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        ss += xr[c] * xr[c];
    const float r = rsqrtf(block_sum(ss, red) / COLS + eps);
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        yr[c] = xr[c] * r * w[c];
}
