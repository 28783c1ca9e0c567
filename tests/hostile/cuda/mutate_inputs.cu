// HOSTILE mutate_inputs: a 16x16 tiled kernel that "pre-scales" A in place to save a multiply: the first
// column of blocks rounds each A element it stages to a multiple of 2^-20 and writes it back through a
// const_cast, so later launches (and the caller) see a modified A.
// EXPECT: status=failed failure=input_modified.
// peak: entry=mm_inplace grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
#define TILE 16

extern "C" __global__ void mm_inplace(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                      int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float* A_rw = const_cast<float*>(A);                          // BUG: the input is not ours to write
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        float a = 0.0f;
        if (row < M && k0 + tx < K) {
            a = A[(size_t)row * K + k0 + tx];
            if (blockIdx.x == 0) {
                a = rintf(a * 1048576.0f) * (1.0f / 1048576.0f);
                A_rw[(size_t)row * K + k0 + tx] = a;
            }
        }
        As[ty][tx] = a;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc = fmaf(As[ty][k], Bs[k][tx], acc);
        __syncthreads();
    }
    if (row < M && col < N) C[(size_t)row * N + col] = acc;
}
