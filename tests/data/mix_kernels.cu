// Source of mix_kernels_sm90a.sass (nvdisasm -c of the NVRTC 13 cubin for sm_90a), checked in for the SASS-mix
// parser's tests: `fma_vec4` is FFMA work on 128-bit global and shared accesses, `mma_tile` one tensor-core tile.
#include <mma.h>

extern "C" __global__ void __launch_bounds__(64) fma_vec4(const float4* a, float4* c, int n)
{
    __shared__ float4 tile[64];
    const int i = blockIdx.x * 64 + threadIdx.x;
    tile[threadIdx.x] = i < n ? a[i] : make_float4(0.f, 0.f, 0.f, 0.f);
    __syncthreads();
    const float4 v = tile[63 - threadIdx.x];
    float4 r;
    r.x = fmaf(v.x, v.y, v.z);
    r.y = fmaf(v.y, v.z, v.w);
    r.z = fmaf(v.z, v.w, v.x);
    r.w = fmaf(v.w, v.x, v.y);
    if (i < n)
        c[i] = r;
}

extern "C" __global__ void mma_tile(const __half* a, const __half* b, float* c)
{
    using namespace nvcuda;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}
