// Register blocking: a 256-thread group computes a 128x128 tile of C and each thread an 8x8 micro-tile held in
// registers, so every value read from groupshared memory feeds 8 multiply-adds. K advances 8 at a time; tiles are
// stored as float4 (A transposed) so the inner loop reads both operands as 128-bit vectors. Each thread owns rows
// {4ty..4ty+3, 64+4ty..64+4ty+3} and the same pattern of columns: a warp's B reads are 16 consecutive float4s
// (no bank conflicts) and its A reads are broadcasts. The next K-slice is loaded into registers while the current
// one is multiplied, hiding global-memory latency. Works for any M, N, K: loads outside the matrices give zero
// (through branches, never reading out of range) and stores outside C are skipped.
// peak: entry=main groups=(cdiv(N, 128), cdiv(M, 128), 1)
#define BM 128
#define BN 128
#define BK 8
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> A;
[[vk::binding(1)]] StructuredBuffer<float> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;

groupshared float4 As[BK][BM / 4];  // As[k][m / 4] holds A[m0 + m .. m0 + m + 3][k0 + k]
groupshared float4 Bs[BK][BN / 4];  // Bs[k][n / 4] holds B[k0 + k][n0 + n .. n0 + n + 3]

float loadA(uint m, uint k)
{
    float v = 0.0;
    if (m < p.M && k < p.K) v = A[m * p.K + k];
    return v;
}

float loadB(uint k, uint n)
{
    float v = 0.0;
    if (k < p.K && n < p.N) v = B[k * p.N + n];
    return v;
}

[numthreads(256, 1, 1)]
void main(uint tid : SV_GroupIndex, uint3 gid : SV_GroupID)
{
    const uint m0 = gid.y * BM, n0 = gid.x * BN;
    const uint tx = tid % 16, ty = tid / 16;
    // Loader roles: for A, 4 consecutive rows at one k (a warp reads 32-byte row segments, whole sectors);
    // for B, 4 consecutive columns of one row (a warp reads 512 contiguous bytes).
    const uint aK = tid % BK, aM4 = tid / BK;  // aM4 in 0..31
    const uint bK = tid / 32, bN4 = tid % 32;

    float4 acc[8][2];
    [unroll] for (uint i = 0; i < 8; ++i) { acc[i][0] = 0.0; acc[i][1] = 0.0; }

    float4 nextA, nextB;
    nextA = float4(loadA(m0 + aM4 * 4 + 0, aK), loadA(m0 + aM4 * 4 + 1, aK),
                   loadA(m0 + aM4 * 4 + 2, aK), loadA(m0 + aM4 * 4 + 3, aK));
    nextB = float4(loadB(bK, n0 + bN4 * 4 + 0), loadB(bK, n0 + bN4 * 4 + 1),
                   loadB(bK, n0 + bN4 * 4 + 2), loadB(bK, n0 + bN4 * 4 + 3));

    for (uint k0 = 0; k0 < p.K; k0 += BK) {
        As[aK][aM4] = nextA;
        Bs[bK][bN4] = nextB;
        GroupMemoryBarrierWithGroupSync();
        const uint k1 = k0 + BK;  // prefetch the next slice; past the end these loads are skipped (zeros)
        nextA = float4(loadA(m0 + aM4 * 4 + 0, k1 + aK), loadA(m0 + aM4 * 4 + 1, k1 + aK),
                       loadA(m0 + aM4 * 4 + 2, k1 + aK), loadA(m0 + aM4 * 4 + 3, k1 + aK));
        nextB = float4(loadB(k1 + bK, n0 + bN4 * 4 + 0), loadB(k1 + bK, n0 + bN4 * 4 + 1),
                       loadB(k1 + bK, n0 + bN4 * 4 + 2), loadB(k1 + bK, n0 + bN4 * 4 + 3));
        [unroll] for (uint k = 0; k < BK; ++k) {
            const float4 a0 = As[k][ty], a1 = As[k][ty + 16];
            const float4 b0 = Bs[k][tx], b1 = Bs[k][tx + 16];
            const float a[8] = { a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w };
            [unroll] for (uint i = 0; i < 8; ++i) {
                acc[i][0] = mad(a[i], b0, acc[i][0]);
                acc[i][1] = mad(a[i], b1, acc[i][1]);
            }
        }
        GroupMemoryBarrierWithGroupSync();
    }

    [unroll] for (uint i = 0; i < 8; ++i) {
        const uint row = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + (i - 4));
        if (row >= p.M) continue;
        [unroll] for (uint h = 0; h < 2; ++h) {
            const uint col = n0 + h * 64 + tx * 4;
            const float4 v = acc[i][h];
            if (col + 3 < p.N) {
                C[row * p.N + col + 0] = v.x; C[row * p.N + col + 1] = v.y;
                C[row * p.N + col + 2] = v.z; C[row * p.N + col + 3] = v.w;
            } else {
                if (col + 0 < p.N) C[row * p.N + col + 0] = v.x;
                if (col + 1 < p.N) C[row * p.N + col + 1] = v.y;
                if (col + 2 < p.N) C[row * p.N + col + 2] = v.z;
            }
        }
    }
}
