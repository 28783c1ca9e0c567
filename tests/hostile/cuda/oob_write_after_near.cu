// HOSTILE oob_write_after_near: a "persistent" kernel: one wave of 132 blocks (an H100's SM count) walks the
// output with a grid-stride loop over flat element indices, each thread computing whole dot products with
// four independent accumulators. The loop bound is `<=`, so some thread lands on idx == M*N, computes a bogus
// row M (reading at most K floats past A, into its guard) and stores it at C[M*N]: just past the output.
// EXPECT: status=failed failure=out_of_bounds_write (after C). Every real element is correct.
// peak: entry=mm_gridstride grid=(132, 1, 1) block=(256, 1, 1) shared=0
extern "C" __global__ void mm_gridstride(const float* __restrict__ A, const float* __restrict__ B,
                                         float* __restrict__ C, int M, int N, int K)
{
    const long long total = (long long)M * N;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx <= total; idx += stride) {  // BUG
        const long long r = idx / N, c = idx % N;
        const float* a = A + r * K;
        float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
        int k = 0;
        for (; k + 3 < K; k += 4) {
            s0 = fmaf(a[k], B[(size_t)k * N + c], s0);
            s1 = fmaf(a[k + 1], B[(size_t)(k + 1) * N + c], s1);
            s2 = fmaf(a[k + 2], B[(size_t)(k + 2) * N + c], s2);
            s3 = fmaf(a[k + 3], B[(size_t)(k + 3) * N + c], s3);
        }
        for (; k < K; ++k) s0 = fmaf(a[k], B[(size_t)k * N + c], s0);
        C[idx] = (s0 + s1) + (s2 + s3);
    }
}
