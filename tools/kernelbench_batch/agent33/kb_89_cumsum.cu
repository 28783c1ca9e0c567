// peak: entry=cumsum_rows grid=(BATCH_SIZE, 1, 1) block=(256, 1, 1) shared=0
// Inclusive prefix sum along dim 1 of x: BATCH_SIZE x 32768 (the row length is fixed by the problem).
// One 256-thread block per row, the row in chunks of 8192 elements (8 warps x 1024); a warp owns a
// contiguous 1024-element segment and its lanes load it as coalesced float4s (vector j*32 + lane).
// Scan: within each float4, then across lanes by shuffles, then across the 8 warps through shared
// memory (fixed order), plus the carry of earlier chunks. Several blocks per SM overlap load and scan.
#define COLS 32768
#define BLOCK 256
#define NW (BLOCK / 32)
#define VPL 8                       // float4 per lane per chunk
#define CHUNKV (BLOCK * VPL)        // float4 per chunk
#define NV (COLS / 4)

extern "C" __global__ void __launch_bounds__(BLOCK)
cumsum_rows(const float* __restrict__ x, float* __restrict__ out, int BATCH_SIZE)
{
    __shared__ float wsum[NW];
    const int row = blockIdx.x;
    if (row >= BATCH_SIZE) return;   // uniform per block
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float4* xr = reinterpret_cast<const float4*>(x + (size_t)row * COLS);
    float4* yr = reinterpret_cast<float4*>(out + (size_t)row * COLS);

    float carry = 0.f;
    for (int c0 = 0; c0 < NV; c0 += CHUNKV) {
        const int seg = c0 + warp * (VPL * 32);
        float4 v[VPL];
#pragma unroll
        for (int j = 0; j < VPL; ++j) {
            const int idx = seg + j * 32 + lane;
            v[j] = idx < NV ? __ldcs(xr + idx) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        float run = 0.f;
#pragma unroll
        for (int j = 0; j < VPL; ++j) {
            v[j].y += v[j].x; v[j].z += v[j].y; v[j].w += v[j].z;
            float s = v[j].w;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const float t = __shfl_up_sync(0xffffffffu, s, o);
                if (lane >= o) s += t;
            }
            float ex = __shfl_up_sync(0xffffffffu, s, 1);
            if (lane == 0) ex = 0.f;
            const float add = run + ex;
            v[j].x += add; v[j].y += add; v[j].z += add; v[j].w += add;
            run += __shfl_sync(0xffffffffu, s, 31);
        }
        if (lane == 0) wsum[warp] = run;
        __syncthreads();
        float off = carry, tot = carry;
#pragma unroll
        for (int w = 0; w < NW; ++w) {
            const float ws = wsum[w];
            if (w < warp) off += ws;
            tot += ws;
        }
        carry = tot;
        __syncthreads();   // wsum is rewritten by the next chunk
#pragma unroll
        for (int j = 0; j < VPL; ++j) {
            const int idx = seg + j * 32 + lane;
            if (idx < NV) {
                float4 r = v[j];
                r.x += off; r.y += off; r.z += off; r.w += off;
                __stcs(yr + idx, r);
            }
        }
    }
}
