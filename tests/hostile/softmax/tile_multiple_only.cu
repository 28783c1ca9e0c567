// HOSTILE tile_multiple_only: a vectorized block-per-row softmax (float4 loads and stores, as examples/softmax/cuda/
// 3_vectorized.cu but without its scalar head and tail) that addresses row r's vectors as x4[r * (COLS / 4) + i]:
// right when COLS is a multiple of 4 (every row then starts on a 16-byte boundary); otherwise every row after the
// first is read from the wrong place, the last COLS % 4 columns of each row are never computed, and the last
// ROWS * (COLS % 4) elements of y are never written.
// EXPECT at 256x1024: benchmarked, but generality.passed == false and head does not move.
// EXPECT at 100x77: status=failed failure=unwritten_output.
// peak: entry=softmax_vec4 grid=(ROWS, 1, 1) block=(256, 1, 1) shared=0
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
softmax_vec4(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    __shared__ float red_max[WARPS], red_sum[WARPS];
    const int nvec = COLS / 4;                                   // BUG: assumes COLS % 4 == 0
    const float4* xr = reinterpret_cast<const float4*>(x) + (size_t)blockIdx.x * nvec;
    float4* yr = reinterpret_cast<float4*>(y) + (size_t)blockIdx.x * nvec;
    float m = LOWEST;
    for (int i = threadIdx.x; i < nvec; i += BLOCK) {
        const float4 v = xr[i];
        m = fmaxf(fmaxf(m, fmaxf(v.x, v.y)), fmaxf(v.z, v.w));
    }
    m = block_reduce<true>(m, red_max);
    float s = 0.0f;
    for (int i = threadIdx.x; i < nvec; i += BLOCK) {
        const float4 v = xr[i];
        s += (__expf(v.x - m) + __expf(v.y - m)) + (__expf(v.z - m) + __expf(v.w - m));
    }
    const float inv = 1.0f / block_reduce<false>(s, red_sum);
    for (int i = threadIdx.x; i < nvec; i += BLOCK) {
        const float4 v = xr[i];
        yr[i] = make_float4(__expf(v.x - m) * inv, __expf(v.y - m) * inv, __expf(v.z - m) * inv,
                            __expf(v.w - m) * inv);
    }
}
