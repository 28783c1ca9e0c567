// 2-D register blocking: a 256-thread block computes a 128x128 tile of C; each thread owns an 8x8 micro-tile
// held in registers. K advances 8 at a time through shared memory; A's tile is stored transposed so that the
// inner loop reads both operands as contiguous 128-bit vectors. Global loads are 128-bit where the row is
// 16-byte aligned (K and N multiples of 4) and fall back to guarded scalar loads otherwise, so any size works.
// peak: entry=matmul_rb2d grid=(cdiv(N, 128), cdiv(M, 128), 1) block=(256, 1, 1) shared=0
#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8

__device__ __forceinline__ float4 load4(const float* base, int row, int col, int rows, int cols, int ld, bool vec)
{
    if (vec && row < rows && col + 3 < cols)
        return *reinterpret_cast<const float4*>(base + (size_t)row * ld + col);
    float4 v;
    const bool r = row < rows;
    v.x = (r && col + 0 < cols) ? base[(size_t)row * ld + col + 0] : 0.0f;
    v.y = (r && col + 1 < cols) ? base[(size_t)row * ld + col + 1] : 0.0f;
    v.z = (r && col + 2 < cols) ? base[(size_t)row * ld + col + 2] : 0.0f;
    v.w = (r && col + 3 < cols) ? base[(size_t)row * ld + col + 3] : 0.0f;
    return v;
}

extern "C" __global__ void __launch_bounds__(256) matmul_rb2d(const float* A, const float* B, float* C,
                                                              int M, int N, int K)
{
    __shared__ __align__(16) float As[BK][BM];  // transposed: As[k][m]
    __shared__ __align__(16) float Bs[BK][BN];
    const int tid = threadIdx.x;
    const int tx = tid % 16, ty = tid / 16;
    const int rowBase = blockIdx.y * BM, colBase = blockIdx.x * BN;
    const bool vecA = (K % 4) == 0, vecB = (N % 4) == 0;

    // Loader coordinates: A tile is 128 rows x 8 cols (2 float4 per row), B tile is 8 rows x 128 cols.
    const int aRow = tid / 2, aCol = (tid % 2) * 4;
    const int bRow = tid / 32, bCol = (tid % 32) * 4;

    float acc[TM][TN] = {};
    float regA[TM], regB[TN];

    for (int k0 = 0; k0 < K; k0 += BK) {
        const float4 a = load4(A, rowBase + aRow, k0 + aCol, M, K, K, vecA);
        As[aCol + 0][aRow] = a.x;
        As[aCol + 1][aRow] = a.y;
        As[aCol + 2][aRow] = a.z;
        As[aCol + 3][aRow] = a.w;
        const float4 b = load4(B, k0 + bRow, colBase + bCol, K, N, N, vecB);
        *reinterpret_cast<float4*>(&Bs[bRow][bCol]) = b;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float4 a0 = *reinterpret_cast<const float4*>(&As[k][ty * TM]);
            const float4 a1 = *reinterpret_cast<const float4*>(&As[k][ty * TM + 4]);
            const float4 b0 = *reinterpret_cast<const float4*>(&Bs[k][tx * TN]);
            const float4 b1 = *reinterpret_cast<const float4*>(&Bs[k][tx * TN + 4]);
            regA[0] = a0.x; regA[1] = a0.y; regA[2] = a0.z; regA[3] = a0.w;
            regA[4] = a1.x; regA[5] = a1.y; regA[6] = a1.z; regA[7] = a1.w;
            regB[0] = b0.x; regB[1] = b0.y; regB[2] = b0.z; regB[3] = b0.w;
            regB[4] = b1.x; regB[5] = b1.y; regB[6] = b1.z; regB[7] = b1.w;
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j)
                    acc[i][j] += regA[i] * regB[j];
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = rowBase + ty * TM + i;
        if (row >= M) break;
        const int col = colBase + tx * TN;
        float* out = C + (size_t)row * N + col;
        if (vecB && col + TN <= N) {
            *reinterpret_cast<float4*>(out) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
            *reinterpret_cast<float4*>(out + 4) = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
        } else {
#pragma unroll
            for (int j = 0; j < TN; ++j)
                if (col + j < N) out[j] = acc[i][j];
        }
    }
}
