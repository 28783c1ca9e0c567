// HOSTILE oob_write_after_far: a correct tiled kernel that keeps a debug "last tile finished" word far past the
// output, at C[M*N + 300000] (1.2 MB beyond the end, well past any 4 KiB guard), written by one thread of the
// last block only, so it rarely faults: it silently corrupts whatever allocation lies there.
// EXPECT: status=failed failure=sanitizer_memcheck where compute-sanitizer runs; else an out-of-bounds verdict
// or error kernel_fault/worker_died if the address is unmapped. Never benchmarked.
// peak: entry=mm_dbg_far grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#define TILE 16

extern "C" __global__ void mm_dbg_far(const float* __restrict__ A, const float* __restrict__ B,
                                      float* __restrict__ C, int M, int N, int K)
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
    if (row < M && col < N) C[(size_t)row * N + col] = acc;
    if (tx == 0 && ty == 0 && blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1)
        C[(size_t)M * N + 300000] = (float)(blockIdx.x + blockIdx.y);   // BUG: far past C
}
