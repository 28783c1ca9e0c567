// HOSTILE cache_by_value: a correct block-per-row softmax with a result cache keyed by the input's address and a
// cheap fingerprint of its values (ROWS, COLS, x[0], x[last]): on a hit every block copies its cached row instead
// of computing. Validation brings new random values, so it misses there; a timed loop on the same buffers hits,
// and returns stale rows after any change the fingerprint does not see.
// EXPECT: status=compile_error failure=compile: writable __device__ state is refused at compile; without that
// check, recheck_wrong_result (the timed inputs change between launches) or impossible_speed.
// peak: entry=softmax_cached grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
#define BLOCK 256
#define WARPS (BLOCK / 32)
#define LOWEST (-3.402823466e38f)
#define CACHE_ELEMS (1 << 22)

__device__ unsigned long long g_key[5];                          // x, ROWS << 32 | COLS, x[0], x[last], valid
__device__ float g_cache[CACHE_ELEMS];

template <bool MAX>
__device__ __forceinline__ float warp_reduce(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, v, o);
        v = MAX ? fmaxf(v, other) : v + other;
    }
    return v;
}

template <bool MAX>
__device__ __forceinline__ float block_reduce(float v, float* red)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_reduce<MAX>(v);
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    v = lane < WARPS ? red[lane] : (MAX ? LOWEST : 0.0f);
    return warp_reduce<MAX>(v);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_cached(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red_max[WARPS], red_sum[WARPS];
    __shared__ int hit;
    const size_t total = (size_t)ROWS * COLS;
    const bool fits = total <= CACHE_ELEMS;
    const unsigned long long key[4] = {(unsigned long long)x, (unsigned long long)ROWS << 32 | (unsigned)COLS,
                                       __float_as_uint(x[0]), __float_as_uint(x[total - 1])};
    if (threadIdx.x == 0) {
        const volatile unsigned long long* k = g_key;
        hit = fits && k[4] == 1ull && k[0] == key[0] && k[1] == key[1] && k[2] == key[2] && k[3] == key[3];
    }
    __syncthreads();
    const size_t base = (size_t)blockIdx.x * COLS;
    float* yr = y + base;
    if (hit) {                                                   // CHEAT
        for (int c = threadIdx.x; c < COLS; c += BLOCK)
            yr[c] = g_cache[base + c];
        return;
    }
    const float* xr = x + base;
    float m = LOWEST;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        m = fmaxf(m, xr[c]);
    m = block_reduce<true>(m, red_max);
    float s = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        s += __expf(xr[c] - m);
    const float inv = 1.0f / block_reduce<false>(s, red_sum);
    for (int c = threadIdx.x; c < COLS; c += BLOCK) {
        const float v = __expf(xr[c] - m) * inv;
        yr[c] = v;
        if (fits)
            g_cache[base + c] = v;
    }
    if (fits && blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) {   // a racy "publish", good enough for a cheat
        __threadfence();
        for (int i = 0; i < 4; ++i)
            g_key[i] = key[i];
        __threadfence();
        g_key[4] = 1ull;
    }
}
