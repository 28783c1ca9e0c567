// regblock_2d plus: K steps of 16, two shared-memory buffers with the next tile prefetched into registers while
// the current one is multiplied (one barrier per step), and a thread layout whose 128-bit shared reads are
// contiguous across a warp (each thread owns rows {4ty.., 64+4ty..} and columns {4tx.., 64+4tx..} of the 128x128
// tile). A's transposed tile rows are padded by 4 floats to spread the transposing stores over more banks.
// Any M, N, K: 128-bit global loads where rows are 16-byte aligned, guarded scalar loads otherwise.
// peak: entry=matmul_db grid=(cdiv(N, 128), cdiv(M, 128), 1) block=(256, 1, 1) shared=0
#define BM 128
#define BN 128
#define BK 16
#define PAD 4

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

__device__ __forceinline__ void store4(float* out, int row, int col, int M, int N, bool vec, float4 v)
{
    if (row >= M)
        return;
    float* p = out + (size_t)row * N + col;
    if (vec && col + 3 < N) {
        *reinterpret_cast<float4*>(p) = v;
        return;
    }
    if (col + 0 < N) p[0] = v.x;
    if (col + 1 < N) p[1] = v.y;
    if (col + 2 < N) p[2] = v.z;
    if (col + 3 < N) p[3] = v.w;
}

extern "C" __global__ void __launch_bounds__(256, 2) matmul_db(const float* A, const float* B, float* C,
                                                            int M, int N, int K)
{
    __shared__ __align__(16) float As[2][BK][BM + PAD];  // transposed: As[buf][k][m]
    __shared__ __align__(16) float Bs[2][BK][BN];
    const int tid = threadIdx.x;
    const int tx = tid % 16, ty = tid / 16;
    const int rowBase = blockIdx.y * BM, colBase = blockIdx.x * BN;
    const bool vecA = (K % 4) == 0, vecB = (N % 4) == 0;

    // Loaders: A's 128x16 tile is 4 float4 per row (rows tid/4 and 64 + tid/4); B's 16x128 tile is 32 float4
    // per row (rows tid/32 and 8 + tid/32).
    const int aRow = tid / 4, aCol = (tid % 4) * 4;
    const int bRow = tid / 32, bCol = (tid % 32) * 4;
    float4 nextA[2], nextB[2];

    auto fetch = [&](int k0) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            nextA[r] = load4(A, rowBase + aRow + 64 * r, k0 + aCol, M, K, K, vecA);
            nextB[r] = load4(B, k0 + bRow + 8 * r, colBase + bCol, K, N, N, vecB);
        }
    };
    auto stash = [&](int buf) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int m = aRow + 64 * r;
            As[buf][aCol + 0][m] = nextA[r].x;
            As[buf][aCol + 1][m] = nextA[r].y;
            As[buf][aCol + 2][m] = nextA[r].z;
            As[buf][aCol + 3][m] = nextA[r].w;
            *reinterpret_cast<float4*>(&Bs[buf][bRow + 8 * r][bCol]) = nextB[r];
        }
    };

    float acc[8][8] = {};
    fetch(0);
    stash(0);
    __syncthreads();

    int buf = 0;
    for (int k0 = 0; k0 < K; k0 += BK) {
        const bool more = k0 + BK < K;
        if (more)
            fetch(k0 + BK);  // in flight while this tile is multiplied
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float4 a0 = *reinterpret_cast<const float4*>(&As[buf][k][ty * 4]);
            const float4 a1 = *reinterpret_cast<const float4*>(&As[buf][k][64 + ty * 4]);
            const float4 b0 = *reinterpret_cast<const float4*>(&Bs[buf][k][tx * 4]);
            const float4 b1 = *reinterpret_cast<const float4*>(&Bs[buf][k][64 + tx * 4]);
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    acc[i][j] += a[i] * b[j];
        }
        if (more)
            stash(buf ^ 1);  // the other buffer was last read before the previous barrier
        __syncthreads();
        buf ^= 1;
    }

#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = rowBase + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
        const int col = colBase + tx * 4;
        store4(C, row, col, M, N, vecB, make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
        store4(C, row, col + 64, M, N, vecB, make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]));
    }
}
