// HOSTILE oob_read_before_near: a block-per-row softmax whose max pass was ported from 1-based code, `xr[c - 1]` with
// c now running from 0: each row's max is taken over the element before the row and all but its last element. A
// softmax does not depend on the value subtracted (and fmaxf drops the NaN a guard holds), so every output is
// right; but row 0 reads x[-1], 4 bytes before the input. Only a memory checker sees that: the value is lost.
// EXPECT: status=failed failure=sanitizer_memcheck (compute-sanitizer: an invalid read just before x).
// peak: entry=softmax_port grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
#define BLOCK 256
#define WARPS (BLOCK / 32)
#define LOWEST (-3.402823466e38f)

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
softmax_port(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red_max[WARPS], red_sum[WARPS];
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float* yr = y + (size_t)blockIdx.x * COLS;
    float m = LOWEST;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        m = fmaxf(m, xr[c - 1]);                                 // BUG: 1-based index left over; row 0 reads x[-1]
    m = block_reduce<true>(m, red_max);
    float s = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        s += __expf(xr[c] - m);
    const float inv = 1.0f / block_reduce<false>(s, red_sum);
    for (int c = threadIdx.x; c < COLS; c += BLOCK)
        yr[c] = __expf(xr[c] - m) * inv;
}
