// f32 matmul whose A and B tiles arrive by TMA (cp.async.bulk.tensor) from server-encoded tensor maps: a test of the
// tensor_map ABI, not a fast kernel. 32x32 tiles, 256 threads, 4 outputs each; one mbarrier per tile load. Sizes TMA
// cannot describe (a row pitch that is not a multiple of 16 bytes: K % 4 or N % 4 for f32) get zero maps from the
// server and take the plain path. Launched as clusters of CLUSTER blocks along x (1 = no cluster): every block
// checks that the cluster it runs in has that many blocks, so a launch that ignored cluster= gives wrong results.
// peak: entry=matmul_tma grid=(cdiv(cdiv(N, 32), CLUSTER) * CLUSTER, cdiv(M, 32), 1) block=(256, 1, 1) shared=0 cluster=(CLUSTER, 1, 1)
// peak: params CLUSTER=[1, 2]
// peak: tensor_map A box=(32, 32) swizzle=0
// peak: tensor_map B box=(32, 32) swizzle=0
struct alignas(64) TensorMap { unsigned long long opaque[16]; };

extern "C" __global__ void __launch_bounds__(256) matmul_tma(const float* A, const float* B, float* C, int M, int N,
                                                             int K, const __grid_constant__ TensorMap mapA,
                                                             const __grid_constant__ TensorMap mapB) {
    __shared__ alignas(128) float As[32][32];
    __shared__ alignas(128) float Bs[32][32];
    __shared__ alignas(8) unsigned long long bar;
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;  // ty: 0..7, rows ty, ty+8, ty+16, ty+24
    const int row0 = blockIdx.y * 32, col0 = blockIdx.x * 32;
    unsigned ranks;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(ranks));
    const float wrong = ranks == CLUSTER ? 0.0f : __int_as_float(0x7fc00000);
    float acc[4] = {wrong, wrong, wrong, wrong};
    const bool tma = (K % 4 == 0) && (N % 4 == 0);
    const unsigned barrier = (unsigned)__cvta_generic_to_shared(&bar);
    if (tma && threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(barrier));
        asm volatile("fence.mbarrier_init.release.cluster;");
    }
    __syncthreads();
    for (int k0 = 0, phase = 0; k0 < K; k0 += 32, phase ^= 1) {
        if (tma) {
            if (threadIdx.x == 0) {
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(barrier), "r"(2 * 32 * 32 * 4));
                asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                             :: "r"((unsigned)__cvta_generic_to_shared(&As[0][0])), "l"(&mapA), "r"(k0), "r"(row0), "r"(barrier) : "memory");
                asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                             :: "r"((unsigned)__cvta_generic_to_shared(&Bs[0][0])), "l"(&mapB), "r"(col0), "r"(k0), "r"(barrier) : "memory");
            }
            unsigned done = 0;
            while (!done) {
                asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                             : "=r"(done) : "r"(barrier), "r"(phase) : "memory");
            }
        } else {
            for (int i = ty; i < 32; i += 8) {
                As[i][tx] = (row0 + i < M && k0 + tx < K) ? A[(size_t)(row0 + i) * K + k0 + tx] : 0.0f;
                Bs[i][tx] = (k0 + i < K && col0 + tx < N) ? B[(size_t)(k0 + i) * N + col0 + tx] : 0.0f;
            }
            __syncthreads();
        }
        for (int k = 0; k < 32; ++k)
            for (int r = 0; r < 4; ++r) acc[r] += As[ty + 8 * r][k] * Bs[k][tx];
        __syncthreads();  // every thread is done with the tiles before the next copy overwrites them
    }
    for (int r = 0; r < 4; ++r) {
        const int row = row0 + ty + 8 * r, col = col0 + tx;
        if (row < M && col < N) C[(size_t)row * N + col] = acc[r];
    }
}
