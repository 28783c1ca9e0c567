// HOSTILE cache_two_slots: the fingerprint cache of cache_by_value.cu with one slot per input set, so that a
// timed loop rotating two input sets hits on every launch after the first two. Keyed on the sizes and the bits
// of A and B's first and last elements. Only inputs that change on every launch away from the fingerprinted
// corners (the per-launch perturbation) expose the stale copy.
// EXPECT: status=failed failure=recheck_wrong_result (or impossible_speed at large sizes).
// peak: entry=mm_two_slots grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#define TILE 16
#define CACHE_ELEMS (1 << 21)

__device__ unsigned int g_key[2][8];      // per slot: M, N, K, A0, Alast, B0, Blast, valid
__device__ float g_cache[2][CACHE_ELEMS];
__device__ unsigned int g_next[1];

__device__ __forceinline__ unsigned bits(float x) { return __float_as_uint(x); }

extern "C" __global__ void mm_two_slots(const float* __restrict__ A, const float* __restrict__ B,
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
    __shared__ int found;
    if (tx == 0 && ty == 0) {  // look in both slots; on a miss, fill the slot after the one filled last
        found = -1;
        for (int s = 0; s < 2 && found < 0; ++s) {
            int same = fits && ((volatile unsigned*)g_key[s])[7] == 1u;
            for (int i = 0; i < 7; ++i) same = same && ((volatile unsigned*)g_key[s])[i] == key[i];
            if (same) found = s;
        }
        hit = found >= 0;
        if (!hit) found = (int)(((volatile unsigned*)g_next)[0] & 1u);
    }
    __syncthreads();
    const int slot = found;
    if (hit) {                                                  // CHEAT
        if (row < M && col < N) C[(size_t)row * N + col] = g_cache[slot][(size_t)row * N + col];
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
        if (fits) g_cache[slot][(size_t)row * N + col] = acc;
    }
    if (fits && blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1 && tx == 0 && ty == 0) {
        __threadfence();
        for (int i = 0; i < 7; ++i) g_key[slot][i] = key[i];
        __threadfence();
        g_key[slot][7] = 1u;
        g_next[0] = (unsigned)slot + 1u;
    }
}
