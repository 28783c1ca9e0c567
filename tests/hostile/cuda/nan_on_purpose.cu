// HOSTILE nan_on_purpose: a correct 16x16 tiled kernel with a "fused epilogue" that applies log() to make the
// output "log-scaled" only along the diagonal, so every negative diagonal element becomes NaN (and it writes
// a NaN outright for element 0, which is what a bad masking constant does).
// EXPECT: status=failed failure=nan_or_inf (not out_of_bounds_read: the NaN is the kernel's own).
// peak: entry=mm_nan grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#define TILE 16

extern "C" __global__ void mm_nan(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                  int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc = fmaf(As[ty][k], Bs[k][tx], acc);
        __syncthreads();
    }
    if (row == col) acc = logf(acc);                              // BUG: NaN for negative values
    if (row == 0 && col == 0) acc = __int_as_float(0x7fc00000);   // and one quiet NaN for sure
    if (row < M && col < N) C[(size_t)row * N + col] = acc;
}
