// HOSTILE printf_flood: a correct 16x16 tiled kernel left with its debug printf on: every thread prints a line
// per K tile. That is ~M*N*K/16 lines per launch (far past the device printf buffer), all of it on the worker's
// stdout. It must not reach the MCP stdio transport, fill a pipe and block the worker, or hang the server.
// EXPECT: status=benchmarked (it is correct, only slow), and the server answers the next call normally.
// peak: entry=mm_chatty grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#define TILE 16

extern "C" __global__ void mm_chatty(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
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
        printf("{\"jsonrpc\": \"2.0\", \"debug\": [%d, %d, %d], \"acc\": %f}\n", row, col, k0, acc);
    }
    if (row < M && col < N) C[(size_t)row * N + col] = acc;
}
