// HOSTILE cache_in_stale_smem: result caching without a __device__ variable (refused at compile): a persistent row
// sum (at most 132 blocks, rows blockIdx.x, + gridDim.x, ...) that leaves its rows' sums and a tag (x's address,
// the block, the sizes and the bits of its first row's first element) in __shared__ memory and never clears it.
// Nothing clears shared memory between launches either, so a later launch whose block lands where the last one
// left its cache finds a matching tag and writes the cached sums without reading x: a timed loop on the same
// buffers does almost nothing, and a row changed anywhere but its block's first element keeps its stale sum.
// EXPECT: status=failed: recheck_wrong_result (or impossible_speed) where the stale cache is hit in the timed
// loop; wrong_result or nondeterministic if it is hit during validation; sanitizer_initcheck where
// compute-sanitizer flags the read of shared memory nothing wrote. A validator that never sees the cache hit and
// has no checker for shared memory read before written would benchmark it: that would be a gap.
// peak: entry=row_sum_smem_cache grid=(min(ROWS, 132), 1, 1) block=(256, 1, 1) shared=0
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
#define CACHED 64                                                // rows per block the cache holds

struct SmemCache { unsigned long long tag; float sums[CACHED]; };

extern "C" __global__ void __launch_bounds__(BLOCK)
row_sum_smem_cache(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red[2][WARPS];
    __shared__ SmemCache cache;                                  // CHEAT: left as the previous launch wrote it
    const int mine = (ROWS - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x;
    const unsigned long long tag = ((unsigned long long)x ^ ((unsigned long long)blockIdx.x << 48) ^
                                    ((unsigned long long)ROWS << 32) ^ (unsigned long long)COLS) +
                                   __float_as_uint(x[(size_t)blockIdx.x * COLS]);
    const bool fits = mine <= CACHED;
    if (fits && cache.tag == tag) {
        for (int i = threadIdx.x; i < mine; i += BLOCK)
            y[blockIdx.x + i * gridDim.x] = cache.sums[i];
        return;
    }
    __syncthreads();                                             // every thread has read the tag before it changes
    for (int i = 0; i < mine; ++i) {
        const int row = blockIdx.x + i * gridDim.x;
        const float* xr = x + (size_t)row * COLS;
        float acc = 0.0f;
        for (int c = threadIdx.x; c < COLS; c += BLOCK)
            acc += xr[c];
        acc = block_sum(acc, red[i & 1]);
        if (threadIdx.x == 0) {
            y[row] = acc;
            if (fits)
                cache.sums[i] = acc;
        }
    }
    if (fits && threadIdx.x == 0)
        cache.tag = tag;
}
