// HOSTILE oob_write_before_far: a correct tiled kernel whose block (0, 0) stores a per-launch scratch word at
// C[-300000] (1.2 MB before the output, past any guard): a "workspace" pointer computed as C minus a fixed
// offset, as if the caller had allocated a workspace in front of C.
// EXPECT: status=failed failure=sanitizer_memcheck where compute-sanitizer runs; else out_of_bounds_write,
// input_modified (if it lands in an input) or error kernel_fault/worker_died. Never benchmarked.
// peak: entry=mm_ws_before grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#define TILE 16
#define WORKSPACE_OFFSET 300000

extern "C" __global__ void mm_ws_before(const float* __restrict__ A, const float* __restrict__ B,
                                        float* __restrict__ C, int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    float* workspace = C - WORKSPACE_OFFSET;                       // BUG: nobody allocated this
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
    if (tx == 0 && ty == 0 && blockIdx.x == 0 && blockIdx.y == 0) workspace[0] = (float)gridDim.x;
}
