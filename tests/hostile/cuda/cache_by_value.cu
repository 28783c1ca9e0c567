// HOSTILE cache_by_value: a correct 16x16 tiled kernel with a result cache keyed by a cheap fingerprint of the
// inputs (sizes plus the bits of A[0], A[last], B[0], B[last]). On a hit it copies the cached C instead of
// computing. Validation always brings new random values, so it always misses there; a timed loop on the same
// inputs always hits. A rotation whose sets agree on the sampled corners (or a re-check with perturbed
// interiors) gets the other set's answer.
// EXPECT: status=failed failure=recheck_wrong_result (or impossible_speed at large sizes).
// peak: entry=mm_fp_cache grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#define TILE 16
#define CACHE_ELEMS (1 << 22)

__device__ unsigned int g_key[8];         // M, N, K, A0, Alast, B0, Blast, valid
__device__ float g_cache[CACHE_ELEMS];

__device__ __forceinline__ unsigned bits(float x) { return __float_as_uint(x); }

extern "C" __global__ void mm_fp_cache(const float* __restrict__ A, const float* __restrict__ B,
                                       float* __restrict__ C, int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    __shared__ int hit;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    const bool fits = (long long)M * N <= CACHE_ELEMS;
    const unsigned key[7] = {(unsigned)M, (unsigned)N, (unsigned)K, bits(A[0]), bits(A[(size_t)M * K - 1]),
                             bits(B[0]), bits(B[(size_t)K * N - 1])};
    if (tx == 0 && ty == 0) {
        int same = fits && ((volatile unsigned*)g_key)[7] == 1u;
        for (int i = 0; i < 7; ++i) same = same && ((volatile unsigned*)g_key)[i] == key[i];
        hit = same;
    }
    __syncthreads();
    if (hit) {                                                  // CHEAT
        if (row < M && col < N) C[(size_t)row * N + col] = g_cache[(size_t)row * N + col];
        return;
    }
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc = fmaf(As[ty][k], Bs[k][tx], acc);
        __syncthreads();
    }
    if (row < M && col < N) {
        C[(size_t)row * N + col] = acc;
        if (fits) g_cache[(size_t)row * N + col] = acc;
    }
    // The last block to finish publishes the key (a racy "publish", good enough for the cheat).
    if (fits && blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1 && tx == 0 && ty == 0) {
        __threadfence();
        for (int i = 0; i < 7; ++i) g_key[i] = key[i];
        __threadfence();
        g_key[7] = 1u;
    }
}
