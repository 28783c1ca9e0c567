// HOSTILE cache_by_value: a correct block-per-row row sum with a per-row cache keyed by the row's address and its
// first value: on a hit the block returns the cached sum without reading the row. Validation brings new random
// values, so it misses there; a timed loop on the same buffers hits, and keeps a stale sum for a row whose other
// elements changed.
// EXPECT: status=compile_error failure=compile: writable __device__ state is refused at compile; without that
// check, recheck_wrong_result or impossible_speed.
// peak: entry=row_sum_cached grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
#define BLOCK 256
#define WARPS (BLOCK / 32)

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

struct RowKey { const float* row; unsigned first; float sum; };
__device__ RowKey g_rows[CACHED_ROWS];

extern "C" __global__ void __launch_bounds__(BLOCK)
row_sum_cached(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[WARPS];
    __shared__ int hit;
    const float* xr = x + (size_t)blockIdx.x * COLS;
    const bool cacheable = blockIdx.x < CACHED_ROWS;
    if (threadIdx.x == 0) {
        const volatile RowKey* k = &g_rows[blockIdx.x % CACHED_ROWS];
        hit = cacheable && k->row == xr && k->first == __float_as_uint(xr[0]);
        if (hit)
            y[blockIdx.x] = k->sum;                              // CHEAT
    }
    __syncthreads();
    if (hit)
        return;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        acc += xr[c];
    acc = block_sum(acc, red);
    if (threadIdx.x == 0) {
        y[blockIdx.x] = acc;
        if (cacheable)
            g_rows[blockIdx.x] = RowKey{xr, __float_as_uint(xr[0]), acc};
    }
}
