// HOSTILE oob_write_after_near: a persistent shader: 64 groups of 256 threads walk C with a grid-stride loop over
// flat indices, four accumulators per dot product. The bound is `<=`, so some thread reaches idx == M*N, computes
// a bogus row M (reading up to K floats past A) and stores it at C[M*N]: just past the output.
// EXPECT: status=failed failure=out_of_bounds_write (after C).
// peak: entry=main groups=(64, 1, 1)
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> A;
[[vk::binding(1)]] StructuredBuffer<float> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;

[numthreads(256, 1, 1)]
void main(uint3 id : SV_DispatchThreadID)
{
    uint total = p.M * p.N;
    for (uint idx = id.x; idx <= total; idx += 64 * 256) {  // BUG: <= visits idx == M*N
        uint r = idx / p.N, c = idx % p.N;
        float s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
        uint k = 0;
        for (; k + 3 < p.K; k += 4) {
            s0 = mad(A[r * p.K + k], B[k * p.N + c], s0);
            s1 = mad(A[r * p.K + k + 1], B[(k + 1) * p.N + c], s1);
            s2 = mad(A[r * p.K + k + 2], B[(k + 2) * p.N + c], s2);
            s3 = mad(A[r * p.K + k + 3], B[(k + 3) * p.N + c], s3);
        }
        for (; k < p.K; ++k) s0 = mad(A[r * p.K + k], B[k * p.N + c], s0);
        C[idx] = (s0 + s1) + (s2 + s3);
    }
}
