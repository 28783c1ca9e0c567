// HOSTILE oob_read_before_near: a block-per-row RMS norm whose sum of squares walks the row backwards ("the second
// pass then starts where the first ended, on lines still in L1") with a 1-based index: c runs from COLS - tid down
// to 0 and reads xr[c - 1], and the bound is written c >= 0 where it should be c > 0. One thread per row reads
// xr[-1]: the element before the row, for row 0 the one before x (a NaN guard). Every row's sum takes in one
// element too many.
// EXPECT: status=failed failure=out_of_bounds_read.
// peak: entry=rmsnorm_back grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
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

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_back(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float* yr = y + (size_t)blockIdx.x * COLS;
    float ss = 0.0f;
    for (int c = COLS - (int)threadIdx.x; c >= 0; c -= BLOCK) {  // BUG: c >= 0 reads xr[-1]
        const float v = xr[c - 1];
        ss += v * v;
    }
    const float r = rsqrtf(block_sum(ss, red) / COLS + EPS);
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        yr[c] = xr[c] * r * w[c];
}
