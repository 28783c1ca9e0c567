// HOSTILE oob_read_after_near: a row-per-warp row sum with branch-free 32-byte loads: each lane loads whole aligned
// 8-float chunks of the flat array (two float4) from the chunk holding the row's first element to the one holding
// its last, and zeroes the elements outside the row after loading them. Every sum is exact, but the last row's
// last chunk runs up to 7 floats past the end of x whenever ROWS * COLS is not a multiple of 8 (256x1024 is;
// 100x77 and 97x89, where compute-sanitizer runs, are not). The values are discarded: the guards never see them.
// EXPECT: status=failed failure=sanitizer_memcheck (an invalid read just past x).
// peak: entry=row_sum_chunks grid=(cdiv(ROWS, 8), 1, 1) block=(256, 1, 1) shared=0
#define WARPS 8
#define CHUNK 8

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float masked(float v, size_t i, size_t begin, size_t end)
{
    return i >= begin && i < end ? v : 0.0f;
}

extern "C" __global__ void __launch_bounds__(32 * WARPS)
row_sum_chunks(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * WARPS + threadIdx.x / 32;
    if (row >= ROWS)
        return;
    const size_t begin = (size_t)row * COLS, end = begin + COLS;
    const size_t first = begin / CHUNK, last = (end + CHUNK - 1) / CHUNK;   // BUG: may end past x
    const float4* xv = reinterpret_cast<const float4*>(x);
    float acc = 0.0f;
    for (size_t k = first + lane; k < last; k += 32) {
        const float4 a = xv[2 * k], b = xv[2 * k + 1];
        const size_t i = k * CHUNK;
        acc += masked(a.x, i, begin, end) + masked(a.y, i + 1, begin, end) + masked(a.z, i + 2, begin, end) +
               masked(a.w, i + 3, begin, end) + masked(b.x, i + 4, begin, end) + masked(b.y, i + 5, begin, end) +
               masked(b.z, i + 6, begin, end) + masked(b.w, i + 7, begin, end);
    }
    acc = warp_sum(acc);
    if (lane == 0)
        y[row] = acc;
}
