// HOSTILE tile_multiple_only: a clean 32x32 shared-memory tiled kernel with 2x1 register blocking (block 32x16)
// and NO edge handling: the grid is N/32 x M/32 (floor) and the K loop runs K/32 whole tiles, so it is exact
// when M, N and K are multiples of 32 and silently leaves the edges unwritten (and drops the K tail) otherwise.
// EXPECT at 128^3 / 256^3: benchmarked but generality.passed == false and head does not move.
// EXPECT at 100x77x53: status=failed failure=unwritten_output.
// peak: entry=mm_t32 grid=(N // 32, M // 32, 1) block=(32, 16, 1) shared=0
#define TILE 32

extern "C" __global__ void mm_t32(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                  int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;               // ty covers rows ty and ty + 16
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc0 = 0.0f, acc1 = 0.0f;
    for (int k0 = 0; k0 + TILE <= K; k0 += TILE) {
        As[ty][tx] = A[(size_t)row * K + k0 + tx];
        As[ty + 16][tx] = A[(size_t)(row + 16) * K + k0 + tx];
        Bs[ty][tx] = B[(size_t)(k0 + ty) * N + col];
        Bs[ty + 16][tx] = B[(size_t)(k0 + ty + 16) * N + col];
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) {
            const float b = Bs[k][tx];
            acc0 = fmaf(As[ty][k], b, acc0);
            acc1 = fmaf(As[ty + 16][k], b, acc1);
        }
        __syncthreads();
    }
    C[(size_t)row * N + col] = acc0;
    C[(size_t)(row + 16) * N + col] = acc1;
}
