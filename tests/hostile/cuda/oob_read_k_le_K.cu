// HOSTILE oob_read_k_le_K: a 1x4 register-blocked kernel (each thread computes 4 adjacent columns) with a
// fence-post error in the K loop: `k <= K`. The extra step reads A[row*K + K] (the next row's first element,
// or one past A for the last row) and B[K*N + c], one row past B: into B's guard. With NaN guards every
// output becomes NaN; with a finite guard it would be off by a tiny product and slip through.
// EXPECT: status=failed failure=out_of_bounds_read.
// peak: entry=mm_rb4 grid=(cdiv(N, 64), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
extern "C" __global__ void mm_rb4(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                  int M, int N, int K)
{
    const int row = blockIdx.y * 16 + threadIdx.y;
    const int col0 = blockIdx.x * 64 + threadIdx.x;           // columns col0, col0+16, col0+32, col0+48
    if (row >= M) return;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int k = 0; k <= K; ++k) {                             // BUG: one step too many
        const float a = A[(size_t)row * K + k];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int c = col0 + 16 * j;
            if (c < N) acc[j] = fmaf(a, B[(size_t)k * N + c], acc[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int c = col0 + 16 * j;
        if (c < N) C[(size_t)row * N + c] = acc[j];
    }
}
