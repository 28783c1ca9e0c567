// HOSTILE oob_read_k_le_K: a 1x4 register-blocked shader (each thread computes 4 columns 16 apart) with a
// fence-post error in the K loop: `k <= K`. The extra step reads A[row*K + K] (one past A for the last row) and
// B[K*N + c], one row past B, into its guard: with NaN guards every output is NaN.
// EXPECT: status=failed failure=out_of_bounds_read.
// peak: entry=main groups=(cdiv(N, 64), cdiv(M, 16), 1)
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> A;
[[vk::binding(1)]] StructuredBuffer<float> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;

[numthreads(16, 16, 1)]
void main(uint3 gtid : SV_GroupThreadID, uint3 gid : SV_GroupID)
{
    uint row = gid.y * 16 + gtid.y;
    uint col0 = gid.x * 64 + gtid.x;
    if (row >= p.M) return;
    float acc[4] = {0.0, 0.0, 0.0, 0.0};
    for (uint k = 0; k <= p.K; ++k) {                            // BUG: one step too many
        float a = A[row * p.K + k];
        [unroll] for (uint j = 0; j < 4; ++j) {
            uint c = col0 + 16 * j;
            if (c < p.N) acc[j] = mad(a, B[k * p.N + c], acc[j]);
        }
    }
    [unroll] for (uint j = 0; j < 4; ++j) {
        uint c = col0 + 16 * j;
        if (c < p.N) C[row * p.N + c] = acc[j];
    }
}
