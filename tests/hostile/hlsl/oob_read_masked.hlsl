// HOSTILE oob_read_masked: the naive shader whose K loop reads a fixed 8 steps past the end of each row and masks
// the value afterwards (`a = A[i]; if (!inside) a = 0;`), as a kernel that pads its loop to a step of 8 without
// guarding the loads might: every output is exact, and the extra reads at the last row run past the end of A.
// Guards never see them (the value is discarded); the validation layer's GPU-assisted validation does.
// EXPECT: status=failed failure=sanitizer_vulkan_oob where the layer is installed (vulkan-validationlayers).
// peak: entry=main groups=(cdiv(N, 16), cdiv(M, 16), 1)
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> A;
[[vk::binding(1)]] StructuredBuffer<float> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;

[numthreads(16, 16, 1)]
void main(uint3 id : SV_DispatchThreadID)
{
    uint row = id.y, col = id.x;
    if (row >= p.M || col >= p.N) return;
    float acc = 0.0;
    for (uint k = 0; k < p.K + 8; ++k) {
        bool inside = k < p.K;
        float a = A[row * p.K + k];
        if (!inside) a = 0.0;
        float b = 0.0;
        if (inside) b = B[k * p.N + col];
        acc += a * b;
    }
    C[row * p.N + col] = acc;
}
