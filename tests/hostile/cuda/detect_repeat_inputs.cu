// HOSTILE detect_repeat_inputs: a correct 16x16 tiled kernel that remembers the input pointers and a fingerprint
// of the previous launch; when they repeat and C's corners already hold finite numbers (so C still has the
// last result), it returns without doing anything. Validation poisons C before every launch, so it always
// computes there; a timed loop that poisons once and re-launches on the same inputs measures nothing.
// EXPECT: status=failed failure=recheck_wrong_result / recheck_unwritten_output (rotating sets, poisoned C), or
// impossible_speed at large sizes.
// peak: entry=mm_same grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#define TILE 16

__device__ unsigned long long g_last[3];   // A, B, bits(A[1]) ^ bits(B[1]) << 32

extern "C" __global__ void mm_same(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                   int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    __shared__ int skip;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    const unsigned long long stamp = (unsigned long long)__float_as_uint(A[(size_t)M * K / 2])
                                     | ((unsigned long long)__float_as_uint(B[(size_t)K * N / 2]) << 32);
    if (tx == 0 && ty == 0) {
        const volatile unsigned long long* last = g_last;
        skip = last[0] == (unsigned long long)A && last[1] == (unsigned long long)B && last[2] == stamp
               && isfinite(C[0]) && isfinite(C[(size_t)M * N - 1]);
    }
    __syncthreads();
    if (skip) return;                                           // CHEAT
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc = fmaf(As[ty][k], Bs[k][tx], acc);
        __syncthreads();
    }
    if (row < M && col < N) C[(size_t)row * N + col] = acc;
    if (blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1 && tx == 0 && ty == 0) {
        g_last[0] = (unsigned long long)A;
        g_last[1] = (unsigned long long)B;
        g_last[2] = stamp;
    }
}
