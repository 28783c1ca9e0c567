// HOSTILE too_fast_fake: a "sampled" kernel: rows 0 and M-1 (the ones a sampling checker always looks at) are
// computed exactly with a 16x16 tiled loop; every other row gets a plausible estimate from 1/16 of the K range
// scaled by 16. Output is dense, finite and of the right magnitude, and the kernel is ~16x too fast.
// EXPECT: status=failed, failure wrong_result (every element is checked at small sizes; sampled rows include
// random ones at large sizes) or impossible_speed.
// peak: entry=mm_sampled grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#define TILE 16

extern "C" __global__ void mm_sampled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                      int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    const bool honest_block = blockIdx.y == 0 || blockIdx.y == gridDim.y - 1;
    float acc = 0.0f;
    if (honest_block) {
        for (int k0 = 0; k0 < K; k0 += TILE) {
            As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.0f;
            Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
            __syncthreads();
#pragma unroll
            for (int k = 0; k < TILE; ++k) acc = fmaf(As[ty][k], Bs[k][tx], acc);
            __syncthreads();
        }
    } else if (row < M && col < N) {
        for (int k = 0; k < K; k += 16) acc = fmaf(A[(size_t)row * K + k], B[(size_t)k * N + col], acc);  // CHEAT
        acc *= 16.0f;
    }
    if (row < M && col < N) C[(size_t)row * N + col] = acc;
}
