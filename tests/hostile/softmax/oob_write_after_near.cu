// HOSTILE oob_write_after_near: a persistent softmax (examples/softmax/cuda/6_persistent.cu's loop: GRID blocks take
// rows blockIdx.x, blockIdx.x + gridDim.x, ...) whose loop bound is `row <= ROWS`: the block that reaches row ROWS
// computes a phantom row from past the end of x (NaN guards, or whatever is there) and stores it at y[ROWS*COLS ...]:
// COLS floats just past the output.
// EXPECT: status=failed failure=out_of_bounds_write (after y).
// peak: entry=softmax_persist grid=(min(ROWS, 132), 1, 1) block=(256, 1, 1) shared=0
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

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_persist(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red_max[2][WARPS], red_sum[2][WARPS];       // by row parity: no barrier needed between rows
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int parity = 0;
    for (int row = blockIdx.x; row <= ROWS; row += gridDim.x, parity ^= 1) {   // BUG: <= visits row ROWS
        const float* xr = x + (size_t)row * COLS;
        float* yr = y + (size_t)row * COLS;
        float m = LOWEST;
        for (int c = threadIdx.x; c < COLS; c += BLOCK)
            m = fmaxf(m, xr[c]);
        m = warp_reduce<true>(m);
        if (lane == 0)
            red_max[parity][warp] = m;
        __syncthreads();
        m = warp_reduce<true>(lane < WARPS ? red_max[parity][lane] : LOWEST);
        float s = 0.0f;
        for (int c = threadIdx.x; c < COLS; c += BLOCK)
            s += __expf(xr[c] - m);
        s = warp_reduce<false>(s);
        if (lane == 0)
            red_sum[parity][warp] = s;
        __syncthreads();
        const float inv = 1.0f / warp_reduce<false>(lane < WARPS ? red_sum[parity][lane] : 0.0f);
        for (int c = threadIdx.x; c < COLS; c += BLOCK)
            yr[c] = __expf(xr[c] - m) * inv;
    }
}
