// peak: entry=softmax_cluster grid=(8 * BATCH_SIZE, 1, 1) block=(512, 1, 1) shared=min(8192 * cdiv(DIM, 16384), 196608)
// Row softmax (dim=1) of x: BATCH_SIZE x DIM.
// One 8-CTA thread-block cluster per row: each CTA streams its share of the row once computing an
// online (max, sum of exp) pair, the 8 pairs are combined through distributed shared memory, then
// each CTA writes exp(x - max) / sum. Where the CTA's share of the row fits its dynamic shared memory
// (up to 192 KB: DIM <= 393216 + 3), the share is copied once into shared memory by cp.async (all of it
// in flight at once, consumed group by group) and never re-read from global memory; longer rows stream
// twice (the second read from L2 where it still holds them). Any DIM: per-row scalar head up to the first
// 16-byte boundary, float4 body, scalar tail. Fixed reduction order: same bits every launch.

#define CL 8
#define BLOCK 512
#define NWARPS (BLOCK / 32)
#define UNROLL 4
#define LOG2E 1.4426950408889634f
#define NEG_INF (__int_as_float(0xff800000))

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    const float M = fmaxf(m, m2);
    if (M == NEG_INF) { m = M; s = 0.f; return; }
    s = s * exp2f(m - M) + s2 * exp2f(m2 - M);
    m = M;
}

// m is kept in the log2 domain (x * LOG2E)
__device__ __forceinline__ void add4(float& m, float& s, float4 v) {
    const float a = v.x * LOG2E, b = v.y * LOG2E, c = v.z * LOG2E, d = v.w * LOG2E;
    const float M = fmaxf(m, fmaxf(fmaxf(a, b), fmaxf(c, d)));
    if (M == NEG_INF) return;
    s = s * exp2f(m - M) + (exp2f(a - M) + exp2f(b - M)) + (exp2f(c - M) + exp2f(d - M));
    m = M;
}
__device__ __forceinline__ void add1(float& m, float& s, float v) {
    const float a = v * LOG2E;
    const float M = fmaxf(m, a);
    if (M == NEG_INF) return;
    s = s * exp2f(m - M) + exp2f(a - M);
    m = M;
}

__device__ __forceinline__ void cp16(unsigned s, const void* g) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(s), "l"(g));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// wait until at most n groups are pending (n clamped to 7: waiting for more is still correct)
__device__ __forceinline__ void cp_wait_dyn(int n) {
    switch (n) {
    case 0: asm volatile("cp.async.wait_group 0;\n" ::); break;
    case 1: asm volatile("cp.async.wait_group 1;\n" ::); break;
    case 2: asm volatile("cp.async.wait_group 2;\n" ::); break;
    case 3: asm volatile("cp.async.wait_group 3;\n" ::); break;
    case 4: asm volatile("cp.async.wait_group 4;\n" ::); break;
    case 5: asm volatile("cp.async.wait_group 5;\n" ::); break;
    case 6: asm volatile("cp.async.wait_group 6;\n" ::); break;
    default: asm volatile("cp.async.wait_group 7;\n" ::); break;
    }
}
#define RPG 4   // rounds (float4 per thread) per cp.async group

extern "C" __global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(BLOCK)
softmax_cluster(const float* __restrict__ x, float* __restrict__ out, int BATCH_SIZE, int DIM)
{
    __shared__ float part_m[NWARPS], part_s[NWARPS];
    __shared__ float blk[2];     // this CTA's (max, sum): read by the cluster through DSMEM
    __shared__ float fin[2];     // the row's (max, 1/sum)

    const int rank = (int)__clusterRelativeBlockRank();
    const int row = blockIdx.x / CL;
    const int tid = threadIdx.x;
    const int g = rank * BLOCK + tid;          // thread index within the row's cluster
    const int G = CL * BLOCK;

    const size_t base = (size_t)row * (size_t)DIM;
    const float* xr = x + base;
    float* orow = out + base;
    // head: elements up to the first 16-byte aligned address
    int head = (int)((4 - (base & 3)) & 3);
    if (head > DIM) head = DIM;
    const int nvec = (DIM - head) >> 2;
    const int tail0 = head + nvec * 4;
    const float4* xv = reinterpret_cast<const float4*>(xr + head);
    float4* ov = reinterpret_cast<float4*>(orow + head);

    extern __shared__ float4 buf[];   // [rounds][BLOCK]: this CTA's share of the row
    unsigned dyn_bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn_bytes));
    const int rounds = (nvec + G - 1) / G;
    const bool fits = rounds <= (int)(dyn_bytes / (16u * BLOCK));   // same for the whole cluster
    const unsigned sbuf = (unsigned)__cvta_generic_to_shared(buf);

    float m = NEG_INF, s = 0.f;
    if (row < BATCH_SIZE) {
        if (fits) {
            const int ngroups = (rounds + RPG - 1) / RPG;
            for (int j = 0; j < rounds; ++j) {
                const int i = g + j * G;
                if (i < nvec) cp16(sbuf + (unsigned)(j * BLOCK + tid) * 16u, xv + i);
                if ((j % RPG) == RPG - 1 || j == rounds - 1) cp_commit();
            }
            if (g < head) add1(m, s, xr[g]);
            if (g < DIM - tail0) add1(m, s, xr[tail0 + g]);
            for (int q = 0; q < ngroups; ++q) {
                cp_wait_dyn(ngroups - 1 - q);   // groups 0..q have landed (own copies only: no barrier)
                const int j1 = min(rounds, (q + 1) * RPG);
                for (int j = q * RPG; j < j1; ++j)
                    if (g + j * G < nvec) add4(m, s, buf[j * BLOCK + tid]);
            }
        } else {
            if (g < head) add1(m, s, xr[g]);
            if (g < DIM - tail0) add1(m, s, xr[tail0 + g]);
            int i = g;
            for (; i + (UNROLL - 1) * G < nvec; i += UNROLL * G) {
                float4 v[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) v[u] = __ldg(xv + i + u * G);
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) add4(m, s, v[u]);
            }
            for (; i < nvec; i += G) add4(m, s, __ldg(xv + i));
        }
    }
    // warp reduction of (m, s), fixed butterfly order
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        merge(m, s, m2, s2);
    }
    const int lane = tid & 31, warp = tid >> 5;
    if (lane == 0) { part_m[warp] = m; part_s[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        m = lane < NWARPS ? part_m[lane] : NEG_INF;
        s = lane < NWARPS ? part_s[lane] : 0.f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
            const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
            merge(m, s, m2, s2);
        }
        if (lane == 0) { blk[0] = m; blk[1] = s; }
    }
    __cluster_barrier_arrive(); __cluster_barrier_wait();   // every CTA's blk is written
    if (warp == 0) {
        float mm = NEG_INF, ss = 0.f;
        if (lane < CL) {
            const float* rb = (const float*)__cluster_map_shared_rank((void*)blk, (unsigned)lane);
            mm = rb[0]; ss = rb[1];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float m2 = __shfl_xor_sync(0xffffffffu, mm, o);
            const float s2 = __shfl_xor_sync(0xffffffffu, ss, o);
            merge(mm, ss, m2, s2);
        }
        if (lane == 0) { fin[0] = mm; fin[1] = 1.0f / ss; }
    }
    __cluster_barrier_arrive(); __cluster_barrier_wait();   // all remote reads done (no CTA leaves while its blk may be read); fin visible
    if (row >= BATCH_SIZE) return;
    const float M = fin[0], inv = fin[1];

    if (g < head) orow[g] = exp2f(xr[g] * LOG2E - M) * inv;
    if (g < DIM - tail0) orow[tail0 + g] = exp2f(xr[tail0 + g] * LOG2E - M) * inv;
    if (fits) {
        for (int j = 0; j < rounds; ++j) {
            const int i = g + j * G;
            if (i < nvec) {
                const float4 v = buf[j * BLOCK + tid];
                float4 r;
                r.x = exp2f(v.x * LOG2E - M) * inv;
                r.y = exp2f(v.y * LOG2E - M) * inv;
                r.z = exp2f(v.z * LOG2E - M) * inv;
                r.w = exp2f(v.w * LOG2E - M) * inv;
                __stcs(ov + i, r);
            }
        }
        return;
    }
    int i = g;
    for (; i + (UNROLL - 1) * G < nvec; i += UNROLL * G) {
        float4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = __ldcs(xv + i + u * G);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            float4 r;
            r.x = exp2f(v[u].x * LOG2E - M) * inv;
            r.y = exp2f(v[u].y * LOG2E - M) * inv;
            r.z = exp2f(v[u].z * LOG2E - M) * inv;
            r.w = exp2f(v[u].w * LOG2E - M) * inv;
            __stcs(ov + i + u * G, r);
        }
    }
    for (; i < nvec; i += G) {
        const float4 v = __ldcs(xv + i);
        float4 r;
        r.x = exp2f(v.x * LOG2E - M) * inv;
        r.y = exp2f(v.y * LOG2E - M) * inv;
        r.z = exp2f(v.z * LOG2E - M) * inv;
        r.w = exp2f(v.w * LOG2E - M) * inv;
        __stcs(ov + i, r);
    }
}
