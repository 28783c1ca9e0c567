// HOSTILE tf32_round_inputs: a 16x16 tiled kernel that rounds A and B to TF32 (10-bit mantissa, cvt.rna.tf32)
// while staging them in shared memory, as a tensor-core TF32 path would, then multiplies in f32. The error
// (~1e-4 relative) is far over the f32 tolerance: an f32 session must not accept TF32 numerics.
// EXPECT: status=failed failure=wrong_result.
// peak: entry=mm_tf32 grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#define TILE 16

__device__ __forceinline__ float to_tf32(float x)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
}

extern "C" __global__ void mm_tf32(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                   int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = to_tf32((row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.0f);
        Bs[ty][tx] = to_tf32((k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc = fmaf(As[ty][k], Bs[k][tx], acc);
        __syncthreads();
    }
    if (row < M && col < N) C[(size_t)row * N + col] = acc;
}
