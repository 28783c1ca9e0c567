// HOSTILE splitk_race: split-K over gridDim.z = 2: slice 0 (about 3/4 of the K tiles, the remainder included)
// stores its partial sum, slice 1 atomically adds its quarter on top. Nothing orders the two slices; slice 1 has
// less work, so its atomicAdd usually lands first (on the poisoned C: NaN) and slice 0's store then overwrites it:
// the quarter is lost, or kept, depending on scheduling.
// EXPECT: status=failed, failure one of nondeterministic / wrong_result / nan_or_inf / sanitizer_racecheck.
// peak: entry=mm_splitk grid=(cdiv(N, 16), cdiv(M, 16), 2) block=(16, 16, 1) shared=0
#define TILE 16

extern "C" __global__ void mm_splitk(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                     int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    const int tiles = (K + TILE - 1) / TILE, half = (3 * tiles + 3) / 4;
    const int kbeg = blockIdx.z * half * TILE, kend = min(K, (int)(blockIdx.z + 1) * half * TILE);
    float acc = 0.0f;
    for (int k0 = kbeg; k0 < kend; k0 += TILE) {
        As[ty][tx] = (row < M && k0 + tx < kend) ? A[(size_t)row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < kend && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc = fmaf(As[ty][k], Bs[k][tx], acc);
        __syncthreads();
    }
    if (row < M && col < N) {
        if (blockIdx.z == 0) C[(size_t)row * N + col] = acc;
        else atomicAdd(&C[(size_t)row * N + col], acc);           // BUG: unordered against slice 0's store
    }
}
