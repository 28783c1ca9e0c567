// HOSTILE illegal_address_far: a register-prefetching tiled kernel that loads the element *before* each
// thread's A tile element one iteration early, to hide latency. The index is unsigned, so for row 0 and
// k0 == 0 the "previous" element is A[0xFFFFFFFF]: 16 GiB past A, far outside every allocation.
// EXPECT: status=error failure=kernel_fault (or worker_died); the next good kernel benchmarks.
// peak: entry=mm_prefetch grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#define TILE 16

extern "C" __global__ void mm_prefetch(const float* __restrict__ A, const float* __restrict__ B,
                                       float* __restrict__ C, int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    float carry = 0.0f;
    if (row < M) {
        const unsigned prev = (unsigned)(row * K + tx) - 1u;  // BUG: wraps for row 0, tx 0
        carry = A[prev];
    }
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc = fmaf(As[ty][k], Bs[k][tx], acc);
        __syncthreads();
    }
    if (row < M && col < N) C[(size_t)row * N + col] = acc + 0.0f * carry;
}
