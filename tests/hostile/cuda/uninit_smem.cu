// HOSTILE uninit_smem: a double-buffered 16x16 tiled kernel (loads tile t+1 into the other stage while computing
// tile t). The prologue fills stage 0 but the main loop starts computing from stage 1, which nothing has written:
// the first tile's products come from uninitialised shared memory (whatever the previous block left there).
// EXPECT: status=failed, failure one of wrong_result / nan_or_inf / nondeterministic / sanitizer_initcheck.
// peak: entry=mm_db grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#define TILE 16

extern "C" __global__ void mm_db(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                 int M, int N, int K)
{
    __shared__ float As[2][TILE][TILE];
    __shared__ float Bs[2][TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    As[0][ty][tx] = (row < M && tx < K) ? A[(size_t)row * K + tx] : 0.0f;
    Bs[0][ty][tx] = (ty < K && col < N) ? B[(size_t)ty * N + col] : 0.0f;
    __syncthreads();
    int stage = 1;                                                // BUG: should start at 0
    for (int k0 = 0; k0 < K; k0 += TILE) {
        const int next = k0 + TILE;
        if (next < K) {
            As[stage ^ 1][ty][tx] = (row < M && next + tx < K) ? A[(size_t)row * K + next + tx] : 0.0f;
            Bs[stage ^ 1][ty][tx] = (next + ty < K && col < N) ? B[(size_t)(next + ty) * N + col] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc = fmaf(As[stage][ty][k], Bs[stage][k][tx], acc);
        __syncthreads();
        stage ^= 1;
    }
    if (row < M && col < N) C[(size_t)row * N + col] = acc;
}
