// KernelBench level 1, square matmul: out = A @ B, all N x N row-major floats. A plain 32 x 32 shared-memory tiling
// (one output per thread, f32 accumulation): correct at any N, and well behind cuBLAS, so its speedup over torch
// eager is expected below 1.
// peak: entry=matmul_tiled grid=(cdiv(N, 32), cdiv(N, 32), 1) block=(32, 32, 1) shared=0
#define TILE 32

extern "C" __global__ void matmul_tiled(const float* __restrict__ A, const float* __restrict__ B,
                                        float* __restrict__ out, int N)
{
    __shared__ float a[TILE][TILE];
    __shared__ float b[TILE][TILE + 1];
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < N; k0 += TILE) {
        const int ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
        a[threadIdx.y][threadIdx.x] = (row < N && ka < N) ? A[(size_t)row * N + ka] : 0.0f;
        b[threadIdx.y][threadIdx.x] = (kb < N && col < N) ? B[(size_t)kb * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc += a[threadIdx.y][k] * b[k][threadIdx.x];
        __syncthreads();
    }
    if (row < N && col < N) out[(size_t)row * N + col] = acc;
}
