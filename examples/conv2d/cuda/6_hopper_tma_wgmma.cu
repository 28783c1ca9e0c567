// Step 6, Hopper (sm_90a; f16 and bf16 sessions): at stride 1 and dilation 1 the implicit GEMM needs no gather.
// Tap (r, s) of an 8 x 8 patch of output pixels (rows p0.., columns q0.. of image n) reads x shifted by
// (r - PAD, s - PAD), and the whole column of taps s reads rows p0 - PAD .. p0 - PAD + R + 6 of columns
// q0 + s - PAD .. + 7: one TMA box (1, R + 7, 8, 64) of a 4-D map over x (N, H, W, C) that lands as R + 7 groups of
// 8 pixel rows of 128 bytes (q fastest, one 1024-byte swizzle atom per image row). The A tile of tap r, the 64 x 64
// K-major operand of one wgmma, is the same box r * 1024 bytes on: every tap of the column from one copy, with the
// padding (negative or past-the-edge coordinates) and channels past C zero-filled by TMA, no padding test anywhere.
//  - Block of 3 warpgroups, one per SM, persistent over tiles of 2 PPW patches x 64 filters: warpgroup 0 is the
//    producer (one thread issues every copy), warpgroups 1 and 2 each multiply PPW patches (m64n64k16, both operands
//    K-major from 128-byte-swizzled shared memory). A stage is one (s, 64-channel slice) step: the tile's x boxes
//    and the R filter taps (boxes (64, 1, 1, 64) of a map over w (K, R, S, C)); as many stages as fit, full and
//    empty mbarriers, the producer running ahead across tiles while the consumers store.
//  - With K <= 64 every tile multiplies the same filter boxes: up to WRES bytes of them (the 3x3 layer's 72 KiB, the
//    1x1 layer's 32 KiB) are loaded once per block and stay; the stages then carry x only (6 at 3x3, 11 at 1x1).
//  - Epilogue by TMA store: row 16 w + g + 8 h of a patch is pixel (p0 + 2 w + h, q0 + g), row m of the 8 x 8 x 64
//    box of y that each consumer stages (swizzled as the map's box) and one thread stores: whole 128-byte lines,
//    pixels past P, Q clipped by the hardware. Where y's map is zero (K % 8 != 0), packed pairs from the registers.
// Other sizes (stride or dilation != 1, R > 3, C % 8 != 0 where the server passes zero maps) take step 5's code,
// BM = 256 on the first 8 warps, in the same kernel.
// H100 through MCP, f16 / bf16: the ResNet-50 3x3 layer 22.8-24.1 / 23.2 us (127-132 / 129% of torch eager), the
// 1x1 layer (C = 256) 27.5-27.7 / 26.9 us (86-99 / 89%); register stores took 29.8 and 32.5 us (f16). NVRTC: 168
// registers, no spills.
// peak: entry=conv2d_hopper grid=(SM_COUNT, 1, 1) block=(384, 1, 1) shared=232448
// peak: params PPW=[1, 2] WRES=[98304, 0]
// peak: tensor_map x box=(1, R + 7, 8, 64) swizzle=128
// peak: tensor_map w box=(64, 1, 1, 64) swizzle=128
// peak: tensor_map y box=(1, 8, 8, 64) swizzle=128
#include <peak/hopper.cuh>

typedef float T;  // the session's dtype: __half or __nv_bfloat16 (the only line to change; float stops at the static_assert)
static_assert(sizeof(T) == 2, "tensor-core step: f16 and bf16 sessions only");

#ifndef PPW
#define PPW 1              // patches of 8 x 8 output pixels (one m64 wgmma tile each) per consumer warpgroup
#endif
#define TILE_PATCHES (2 * PPW)
#ifndef WRES
#define WRES 98304         // bytes of filter boxes a block may keep resident (0: always stream them)
#endif
#define MAX_STAGES 16      // mbarrier pairs reserved at the start of shared memory
#define B_TAP_BYTES 8192   // one filter tap: 64 filters x 64 channels
#define FB_BM 256          // the fallback (step 5): 256 rows x 64 filters on warps 0..7
#define FB_STAGES 3
#define BN 64
#define BK 64

// ---------------------------------------------------------------------------------------------------------------
// The fallback: step 5 (mma.sync from swizzled shared memory, cp.async gather), unchanged but for its tile coming
// as an argument (the grid is persistent) and its barrier naming the 256 threads that run it.
#define ROWS (FB_BM / 8)
#define A_PER (FB_BM / ROWS)
#define B_PER (BN / ROWS)
#define A_BYTES (FB_BM * BK * 2)
#define STAGE_BYTES ((FB_BM + BN) * BK * 2)

enum { SCALAR = 0, CHUNK = 1 };

__device__ __forceinline__ void fb_sync() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, bool whole)
{
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(whole ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N_> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N_) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], const unsigned* b, const __half*)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], const unsigned* b,
                                         const __nv_bfloat16*)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ unsigned pack2(float lo, float hi, const __half*)
{
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&v);
}
__device__ __forceinline__ unsigned pack2(float lo, float hi, const __nv_bfloat16*)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&v);
}

template <int MODE>
__device__ __forceinline__ void conv_tile(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                          unsigned char* smem, long long m0, int k0, int N, int H, int W, int C,
                                          int K, int R, int S, int STRIDE, int PAD, int DIL, int P, int Q)
{
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const long long M = (long long)N * P * Q;
    const int G = R * S * C;
    const unsigned smem0 = (unsigned)__cvta_generic_to_shared(smem);

    const int j = tid % 8, row0 = tid / 8;
    const unsigned cp_off = row0 * 128 + ((j ^ (row0 % 8)) << 4);
    int base[A_PER], h0[A_PER], w0[A_PER];
    int q, p, n;
    {
        const long long m = m0 + row0, t = m / Q;
        q = (int)(m - t * Q);
        const long long u = t / P;
        p = (int)(t - u * P);
        n = (int)(u < N ? u : N);
    }
#pragma unroll
    for (int i = 0; i < A_PER; ++i) {
        if (n < N) {
            h0[i] = p * STRIDE - PAD;
            w0[i] = q * STRIDE - PAD;
            base[i] = MODE == CHUNK ? (n * H + h0[i]) * W + w0[i] : n;
        } else {
            h0[i] = -(1 << 30);
            w0[i] = 0;
            base[i] = 0;
        }
        q += ROWS;
        while (q >= Q && n < N) {
            q -= Q;
            if (++p == P) { p = 0; ++n; }
        }
    }
    int gl = 8 * j, lc = 8 * j, lr = 0, ls = 0;
    if (MODE == CHUNK)
        while (lc >= C) {
            lc -= C;
            if (++ls == S) { ls = 0; ++lr; }
        }

    auto load = [&](int stage) {
        const unsigned sa = smem0 + stage * STAGE_BYTES, sb = sa + A_BYTES;
        if (MODE == CHUNK) {
            const bool tap_ok = lr < R;
            const int dh = lr * DIL, dw = ls * DIL, tap = dh * W + dw;
#pragma unroll
            for (int i = 0; i < A_PER; ++i) {
                const bool ok = tap_ok && (unsigned)(h0[i] + dh) < (unsigned)H && (unsigned)(w0[i] + dw) < (unsigned)W;
                const T* src = ok ? x + (long long)(base[i] + tap) * C + lc : x;
                cp_async16(sa + cp_off + i * ROWS * 128, src, ok);
            }
#pragma unroll
            for (int i = 0; i < B_PER; ++i) {
                const int k = k0 + row0 + i * ROWS;
                const bool ok = tap_ok && k < K;
                cp_async16(sb + cp_off + i * ROWS * 128, ok ? w + (long long)k * G + gl : w, ok);
            }
            gl += BK;
            lc += BK;
            while (lc >= C) {
                lc -= C;
                if (++ls == S) { ls = 0; ++lr; }
            }
        } else {
            unsigned char* a = smem + stage * STAGE_BYTES + cp_off;
#pragma unroll
            for (int i = 0; i < A_PER; ++i)
                for (int e = 0; e < 8; ++e) {
                    const int g = gl + e;
                    T v = T(0.0f);
                    if (g < G) {
                        const int c = g % C, rs = g / C, s = rs % S, r = rs / S;
                        const int h = h0[i] + r * DIL, v_ = w0[i] + s * DIL;
                        if (h >= 0 && h < H && v_ >= 0 && v_ < W) v = x[(((long long)base[i] * H + h) * W + v_) * C + c];
                    }
                    reinterpret_cast<T*>(a + i * ROWS * 128)[e] = v;
                }
#pragma unroll
            for (int i = 0; i < B_PER; ++i) {
                const int k = k0 + row0 + i * ROWS;
                for (int e = 0; e < 8; ++e) {
                    const int g = gl + e;
                    reinterpret_cast<T*>(a + A_BYTES + i * ROWS * 128)[e] =
                        (k < K && g < G) ? w[(long long)k * G + g] : T(0.0f);
                }
            }
            gl += BK;
        }
    };

    const int wm = (warp / 2) * 64, wn = (warp % 2) * 32, sw = lane % 8;
    const unsigned a_row = (wm + lane % 16) * 128, b_row = A_BYTES + (wn + lane % 8 + 8 * (lane / 16)) * 128;
    const int a_ch = lane / 16, b_ch = (lane / 8) % 2;
    float acc[4][4][4];
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0f;

    const int tiles = (G + BK - 1) / BK;
#pragma unroll
    for (int st = 0; st < FB_STAGES - 1; ++st) {
        if (st < tiles) load(st);
        cp_async_commit();
    }
    for (int t = 0; t < tiles; ++t) {
        cp_async_wait<FB_STAGES - 2>();
        fb_sync();
        if (t + FB_STAGES - 1 < tiles) load((t + FB_STAGES - 1) % FB_STAGES);
        cp_async_commit();
        const unsigned s0 = smem0 + (t % FB_STAGES) * STAGE_BYTES;
        unsigned af[2][4][4], bf[2][2][4];
        auto frags = [&](int buf, int kk) {
#pragma unroll
            for (int mi = 0; mi < 4; ++mi)
                ldmatrix_x4(af[buf][mi], s0 + a_row + mi * 16 * 128 + (((2 * kk + a_ch) ^ sw) << 4));
#pragma unroll
            for (int nj = 0; nj < 2; ++nj)
                ldmatrix_x4(bf[buf][nj], s0 + b_row + nj * 16 * 128 + (((2 * kk + b_ch) ^ sw) << 4));
        };
        frags(0, 0);
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            if (kk + 1 < BK / 16) frags((kk + 1) % 2, kk + 1);
#pragma unroll
            for (int mi = 0; mi < 4; ++mi)
#pragma unroll
                for (int ni = 0; ni < 4; ++ni)
                    mma16816(acc[mi][ni], af[kk % 2][mi], &bf[kk % 2][ni / 2][(ni % 2) * 2], (const T*)0);
        }
    }
    cp_async_wait<0>();
    fb_sync();  // every warp is done with the stages before the next tile's prologue refills them

    const bool pairs = K % 2 == 0;
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const long long m = m0 + wm + mi * 16 + lane / 4 + half * 8;
            if (m >= M) continue;
            T* yrow = y + m * K;
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) {
                const int k = k0 + wn + ni * 8 + 2 * (lane % 4);
                const float lo = acc[mi][ni][2 * half], hi = acc[mi][ni][2 * half + 1];
                if (pairs && k + 1 < K) {
                    *reinterpret_cast<unsigned*>(yrow + k) = pack2(lo, hi, (const T*)0);
                } else {
                    if (k < K) yrow[k] = T(lo);
                    if (k + 1 < K) yrow[k + 1] = T(hi);
                }
            }
        }
}

// ---------------------------------------------------------------------------------------------------------------
// The fast path.

// Patch `i` of the N x ceil(P/8) x ceil(Q/8) patches: its image and top-left output pixel.
__device__ __forceinline__ void patch_of(int i, int PT, int QT, int& n, int& p0, int& q0)
{
    n = i / (PT * QT);
    const int rem = i - n * PT * QT;
    p0 = (rem / QT) * 8;
    q0 = (rem % QT) * 8;
}

// The 128 threads of consumer warpgroup cw (barrier 1 is the fallback's); immediate ids, so ptxas reserves 4 barriers.
__device__ __forceinline__ void consumer_sync(int cw)
{
    if (cw == 0)
        asm volatile("bar.sync 2, 128;\n" ::: "memory");
    else
        asm volatile("bar.sync 3, 128;\n" ::: "memory");
}

__device__ __forceinline__ void conv_tma(T* __restrict__ y, unsigned char* smem, const peak::TensorMap& map_x,
                                         const peak::TensorMap& map_w, const peak::TensorMap& map_y, int N, int C,
                                         int K, int R, int S, int PAD, int P, int Q)
{
    const int tid = threadIdx.x, wg = tid / 128;
    const int PT = (P + 7) / 8, QT = (Q + 7) / 8, patches = N * PT * QT, KT = (K + BN - 1) / BN;
    const int count = (patches + TILE_PATCHES - 1) / TILE_PATCHES * KT, CT = (C + BK - 1) / BK, steps = S * CT;
    // Shared memory: the barriers, then 1024-aligned stages (the 128-byte swizzle is a function of address bits).
    unsigned dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(dyn));
    const unsigned bars = peak::smem_addr(smem), full = bars, empty = bars + 8 * MAX_STAGES;
    const unsigned w_full = bars + 16 * MAX_STAGES, base = (w_full + 8 + 1023) & ~1023u;
    // One filter block (K <= 64): every tile multiplies the same R*S*CT filter boxes; when they fit in WRES bytes,
    // each block loads them once (w_full) and its stages carry x only.
    const unsigned w_bytes = R * S * CT * B_TAP_BYTES;
    const bool resident = KT == 1 && w_bytes <= WRES, busy = blockIdx.x < count;
    // Where y's map is usable (K % 8 == 0), each consumer stages its patches' outputs (8 KiB each, swizzled as the
    // map's box) and one thread stores them by TMA: whole 128-byte lines, edges clipped by the hardware, and the
    // warpgroup goes on to its next tile while the copy drains.
    const bool staged = peak::tma_usable(map_y);
    const unsigned out_bytes = staged ? TILE_PATCHES * 8192 : 0, filters = base + out_bytes;
    const unsigned a_bytes = (R + 7) * 1024, b_off = TILE_PATCHES * a_bytes;
    const unsigned stages = filters + (resident ? w_bytes : 0), stage_bytes = b_off + (resident ? 0 : R * B_TAP_BYTES);
    const int nst = min(MAX_STAGES, (int)((bars + dyn - stages) / stage_bytes));
    if (tid == 0) {
        peak::tma_prefetch(map_x);
        peak::tma_prefetch(map_w);
        if (staged) peak::tma_prefetch(map_y);
        for (int s = 0; s < nst; ++s) {
            peak::mbar_init(full + 8 * s, 1);
            peak::mbar_init(empty + 8 * s, 8);  // lane 0 of each consumer warp
        }
        peak::mbar_init(w_full, 1);
        peak::mbar_init_fence();
    }
    __syncthreads();

    if (wg == 0) {  // producer: one thread issues every copy; stage and parity run on across tiles
        if (tid != 0) return;
        if (resident && busy) {  // filter box (s, c, r) at ((s CT + c) R + r) * 8 KiB
            peak::mbar_arrive_expect_tx(w_full, w_bytes);
            for (int s = 0; s < S; ++s)
                for (int c = 0; c < CT; ++c)
                    for (int r = 0; r < R; ++r)
                        peak::tma_load_4d(filters + ((s * CT + c) * R + r) * B_TAP_BYTES, map_w, w_full, c * BK, s, r, 0);
        }
        int st = 0;
        unsigned phase = 0;
        for (int t = blockIdx.x; t < count; t += gridDim.x) {
            const int mt = t / KT, k0 = (t % KT) * BN;
            int n[TILE_PATCHES], p0[TILE_PATCHES], q0[TILE_PATCHES];
            for (int j = 0; j < TILE_PATCHES; ++j)  // a patch past the last loads the last again (never stored)
                patch_of(min(TILE_PATCHES * mt + j, patches - 1), PT, QT, n[j], p0[j], q0[j]);
            for (int s = 0; s < S; ++s)
                for (int c = 0; c < CT; ++c) {
                    const unsigned stage = stages + st * stage_bytes, bar = full + 8 * st;
                    peak::mbar_wait(empty + 8 * st, phase ^ 1);
                    peak::mbar_arrive_expect_tx(bar, stage_bytes);
                    for (int j = 0; j < TILE_PATCHES; ++j)  // rows p0 - PAD .. + R + 6, columns q0 + s - PAD .. + 7
                        peak::tma_load_4d(stage + j * a_bytes, map_x, bar, c * BK, q0[j] + s - PAD, p0[j] - PAD, n[j]);
                    if (!resident)
                        for (int r = 0; r < R; ++r)
                            peak::tma_load_4d(stage + b_off + r * B_TAP_BYTES, map_w, bar, c * BK, s, r, k0);
                    if (++st == nst) { st = 0; phase ^= 1; }
                }
        }
        return;
    }

    // Consumers: warpgroup 1 + cw multiplies patches PPW cw .. PPW cw + PPW - 1 of every tile.
    const int cw = wg - 1, t128 = tid % 128, warp = t128 / 32, lane = tid % 32;
    int st = 0, prev = 0;
    unsigned phase = 0;
    float d[PPW][32];
    if (resident && busy) peak::mbar_wait(w_full, 0);
    for (int t = blockIdx.x; t < count; t += gridDim.x) {
        const int mt = t / KT, k0 = (t % KT) * BN;
#pragma unroll
        for (int i = 0; i < PPW; ++i)
#pragma unroll
            for (int e = 0; e < 32; ++e) d[i][e] = 0.0f;
        for (int step = 0; step < steps; ++step) {
            const unsigned stage = stages + st * stage_bytes, a = stage + PPW * cw * a_bytes;
            const unsigned b = resident ? filters + step * R * B_TAP_BYTES : stage + b_off;
            peak::mbar_wait(full + 8 * st, phase);
            __syncwarp();  // the warp leaves the spin together: wgmma is .sync.aligned
            peak::wgmma_fence();
            for (int r = 0; r < R; ++r)  // tap r: the box's pixel rows r*8 .. r*8 + 63, 1024 bytes per image row
#pragma unroll
                for (int kk = 0; kk < BK / 16; ++kk)
#pragma unroll
                    for (int i = 0; i < PPW; ++i)
                        peak::wgmma_kmajor_m64n64k16(
                            d[i], peak::wgmma_desc_sw128(a + i * a_bytes + r * 1024 + kk * 32, 16, 1024),
                            peak::wgmma_desc_sw128(b + r * B_TAP_BYTES + kk * 32, 16, 1024), 1, T());
            peak::wgmma_commit();
            peak::wgmma_wait<1>();  // the previous step's group is done: its stage may be refilled
            if (step > 0 && lane == 0) peak::mbar_arrive(empty + 8 * prev);
            prev = st;
            if (++st == nst) { st = 0; phase ^= 1; }
        }
        peak::wgmma_wait<0>();
        if (lane == 0) peak::mbar_arrive(empty + 8 * prev);

        // Row 16 warp + lane/4 + 8h of a patch is pixel (p0 + 2 warp + h, q0 + lane/4).
        if (staged) {  // row m of patch i at out + i * 8 KiB + 128 m, its 16-byte chunk j at chunk j ^ (m % 8)
            const unsigned out = base + PPW * cw * 8192;
            if (t128 == 0) peak::bulk_wait_read<0>();  // the last tile's copies have read the staging buffer
            consumer_sync(cw);
#pragma unroll
            for (int i = 0; i < PPW; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int jn = 0; jn < 8; ++jn) {
                        const unsigned at = out + i * 8192 + (16 * warp + lane / 4 + 8 * h) * 128 +
                                            ((jn ^ (lane / 4)) << 4) + 4 * (lane % 4);
                        const unsigned v = pack2(d[i][4 * jn + 2 * h], d[i][4 * jn + 2 * h + 1], (const T*)0);
                        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(v) : "memory");
                    }
            peak::fence_proxy_async();  // each thread's writes, visible to the TMA unit
            consumer_sync(cw);
            if (t128 == 0) {
                for (int i = 0; i < PPW; ++i) {
                    const int patch = TILE_PATCHES * mt + PPW * cw + i;
                    if (patch >= patches) break;
                    int n, p0, q0;
                    patch_of(patch, PT, QT, n, p0, q0);
                    peak::tma_store_4d(map_y, out + i * 8192, k0, q0, p0, n);
                }
                peak::bulk_commit();
            }
            continue;
        }
        const bool pairs = K % 2 == 0;
#pragma unroll
        for (int i = 0; i < PPW; ++i) {
            const int patch = TILE_PATCHES * mt + PPW * cw + i;
            int n, p0, q0;
            patch_of(patch, PT, QT, n, p0, q0);
            const int q = q0 + lane / 4;
            if (patch >= patches || q >= Q) continue;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int p = p0 + 2 * warp + h;
                if (p >= P) continue;
                T* yrow = y + (((long long)n * P + p) * Q + q) * K;
#pragma unroll
                for (int jn = 0; jn < 8; ++jn) {
                    const int k = k0 + 8 * jn + 2 * (lane % 4);
                    const float lo = d[i][4 * jn + 2 * h], hi = d[i][4 * jn + 2 * h + 1];
                    if (pairs && k + 1 < K) {
                        *reinterpret_cast<unsigned*>(yrow + k) = pack2(lo, hi, (const T*)0);
                    } else {
                        if (k < K) yrow[k] = T(lo);
                        if (k + 1 < K) yrow[k + 1] = T(hi);
                    }
                }
            }
        }
    }
    if (staged && t128 == 0) peak::bulk_wait<0>();  // the last copies are done before the block's memory goes
}

extern "C" __global__ void __launch_bounds__(384, 1) conv2d_hopper(
    const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int N, int H, int W, int C, int K, int R,
    int S, int STRIDE, int PAD, int DIL, int P, int Q, const __grid_constant__ peak::TensorMap map_x,
    const __grid_constant__ peak::TensorMap map_w, const __grid_constant__ peak::TensorMap map_y)
{
    extern __shared__ __align__(1024) unsigned char smem[];
    // The shifted boxes need stride 1, dilation 1 and a stage for R + 7 image rows; the maps need C % 8 == 0 (the
    // server passes zeros otherwise).
    if (STRIDE == 1 && DIL == 1 && R <= 3 && peak::tma_usable(map_x) && peak::tma_usable(map_w)) {
        conv_tma(y, smem, map_x, map_w, map_y, N, C, K, R, S, PAD, P, Q);
        return;
    }
    if (threadIdx.x >= FB_BM) return;
    const long long tiles_m = ((long long)N * P * Q + FB_BM - 1) / FB_BM;
    const int tiles_n = (K + BN - 1) / BN;
    const bool chunk = C % 8 == 0 && ((long long)N * H + PAD + 1) * W + PAD < (1LL << 31);
    for (long long t = blockIdx.x; t < tiles_m * tiles_n; t += gridDim.x) {
        const long long m0 = (t / tiles_n) * FB_BM;
        const int k0 = (int)(t % tiles_n) * BN;
        if (chunk)
            conv_tile<CHUNK>(x, w, y, smem, m0, k0, N, H, W, C, K, R, S, STRIDE, PAD, DIL, P, Q);
        else
            conv_tile<SCALAR>(x, w, y, smem, m0, k0, N, H, W, C, K, R, S, STRIDE, PAD, DIL, P, Q);
    }
}
