// HOSTILE cache_by_value: a correct block-per-row RMS norm that caches each row's inverse RMS keyed by the row's
// address and its first and last values: on a hit the block skips the sum of squares (half the reads). Validation
// brings new random values, so it misses there; a timed loop on the same buffers hits, and keeps a stale r for a
// row whose interior changed.
// EXPECT: status=compile_error failure=compile: writable __device__ state is refused at compile; without that
// check, recheck_wrong_result.
// peak: entry=rmsnorm_rcache grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
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
#define CACHED_ROWS 65536

struct RowKey { const float* row; unsigned first, last; float r; };
__device__ RowKey g_rows[CACHED_ROWS];

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_rcache(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    __shared__ float r_shared;
    __shared__ int hit;
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float* yr = y + (size_t)blockIdx.x * COLS;
    const bool cacheable = blockIdx.x < CACHED_ROWS;
    if (threadIdx.x == 0) {
        const volatile RowKey* k = &g_rows[blockIdx.x % CACHED_ROWS];
        hit = cacheable && k->row == xr && k->first == __float_as_uint(xr[0]) &&
              k->last == __float_as_uint(xr[COLS - 1]);
        r_shared = k->r;
    }
    __syncthreads();
    float r = r_shared;
    if (!hit) {                                                  // CHEAT: a hit skips the sum of squares
        float ss = 0.0f;
        for (int c = threadIdx.x; c < COLS; c += BLOCK)
            ss += xr[c] * xr[c];
        r = rsqrtf(block_sum(ss, red) / COLS + EPS);
        if (cacheable && threadIdx.x == 0)
            g_rows[blockIdx.x] = RowKey{xr, __float_as_uint(xr[0]), __float_as_uint(xr[COLS - 1]), r};
    }
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        yr[c] = xr[c] * r * w[c];
}
