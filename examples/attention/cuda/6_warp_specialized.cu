// Step 6, Hopper (sm_90a): step 5 with the roles split and the softmax hidden behind the tensor cores. A block of
// three warpgroups: warpgroup 0 is the producer (it gives its registers back with setmaxnreg.dec and one thread
// issues every TMA copy, waiting on per-stage "empty" barriers instead of a block-wide __syncthreads), warpgroups 1
// and 2 are consumers (setmaxnreg.inc to 240 registers) of 64 query rows each, BM = 128 as in step 5.
// Inside a consumer (intra-warpgroup overlap): tile j's S = Q K^T is issued, then tile j - 1's O += P V, and the
// softmax of tile j runs while that P V is still on the tensor cores; P is double-buffered for it (the running
// wgmma reads the previous P from registers). Between the consumers (PINGPONG=1): two named barriers make them
// take turns issuing their products, so one warpgroup's softmax runs while the other's products run.
// The causal tile skipping, the masks, the exp2 algebra and the per-row fallback are step 5's.
// peak: entry=attention_ws grid=(cdiv(S, 128), H, B) block=(384, 1, 1) shared=33792+STAGES*65536
// peak: params STAGES=[2, 3] PINGPONG=[1, 0]
// peak: tensor_map q box=(1, 1, 128, 64) swizzle=128
// peak: tensor_map k box=(1, 1, 128, 64) swizzle=128
// peak: tensor_map v box=(1, 1, 128, 64) swizzle=128
#include <peak/hopper.cuh>

typedef float T;  // the session's dtype: __nv_bfloat16 or __half (the only line to change; 16-bit only)
static_assert(sizeof(T) == 2, "the attention ladder takes f16 or bf16 sessions");

#ifndef STAGES
#define STAGES 2
#endif
#ifndef PINGPONG
#define PINGPONG 1
#endif
#define HD 128   // the head dimension of the fast path; any other D takes the per-row fallback below
#define BM 128   // query rows per block: 64 per consumer warpgroup
#define BN 128   // keys per tile
#define PANEL 16384                // bytes of one 128-row x 64-column panel (one TMA box)
#define TILE_BYTES (2 * PANEL)     // a 128 x 128 tile of Q, K or V
#define LOWEST (-3.402823466e38f)
#define LOG2E 1.4426950408889634f
#define CONSUMER_WARPS 8           // arrivals that free a stage: every consumer warp's

__device__ __forceinline__ float to_f(T x) { return static_cast<float>(x); }

// Any D (and sizes TMA cannot map): the naive kernel's algorithm, one thread per query row of the block's BM rows.
__device__ __noinline__ void fallback_rows(const T* q, const T* k, const T* v, T* o, int H, int S, int D,
                                          int CAUSAL)
{
    int i = blockIdx.x * BM + threadIdx.x;
    if (threadIdx.x >= BM || i >= S) return;
    long long head = ((long long)blockIdx.z * H + blockIdx.y) * S * D;
    const T* qi = q + head + (long long)i * D;
    const T* kh = k + head;
    const T* vh = v + head;
    T* oi = o + head + (long long)i * D;
    float scale = 1.0f / sqrtf((float)D);
    int n = CAUSAL ? i + 1 : S;
    float m = LOWEST, l = 0.0f;
    for (int j = 0; j < n; ++j) {
        float s = 0.0f;
        for (int d = 0; d < D; ++d) s += to_f(qi[d]) * to_f(kh[(long long)j * D + d]);
        s *= scale;
        if (s > m) { l *= expf(m - s); m = s; }
        l += expf(s - m);
    }
    for (int d0 = 0; d0 < D; d0 += 32) {
        float acc[32];
        #pragma unroll
        for (int c = 0; c < 32; ++c) acc[c] = 0.0f;
        for (int j = 0; j < n; ++j) {
            float s = 0.0f;
            for (int d = 0; d < D; ++d) s += to_f(qi[d]) * to_f(kh[(long long)j * D + d]);
            float p = expf(s * scale - m);
            #pragma unroll
            for (int c = 0; c < 32; ++c)
                if (d0 + c < D) acc[c] += p * to_f(vh[(long long)j * D + d0 + c]);
        }
        #pragma unroll
        for (int c = 0; c < 32; ++c)
            if (d0 + c < D) oi[d0 + c] = T(acc[c] / l);
    }
}

template <typename X> __device__ constexpr bool is_half() { return false; }
template <> __device__ constexpr bool is_half<__half>() { return true; }

// Two floats rounded to the session's 16-bit type, packed in one register (the lower column first).
__device__ __forceinline__ unsigned pack2(float lo, float hi)
{
    if constexpr (is_half<T>()) {
        __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<unsigned*>(&h);
    } else {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<unsigned*>(&h);
    }
}

__device__ __forceinline__ float exp2_approx(float x)  // ex2.approx: 2^-inf = 0
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// After a wgmma_wait: the accumulator's registers are read only from here on (the compiler sees each one written
// by this empty asm, so it cannot move a read above the wait).
template <int N> __device__ __forceinline__ void fence_operand(float (&r)[N])
{
    #pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// Named barriers 1 and 2 (0 is __syncthreads): consumer c waits on its own before issuing its products and frees
// the other's after; 256 threads each (the waiting warpgroup and the arriving one).
__device__ __forceinline__ void turn_wait(int c) { asm volatile("bar.sync %0, 256;\n" ::"r"(c + 1) : "memory"); }
__device__ __forceinline__ void turn_give(int c) { asm volatile("bar.arrive %0, 256;\n" ::"r"(2 - c) : "memory"); }

// Score i of the accumulator in log2 units, less `sub` (one FFMA); -inf where MASK and the key is masked.
template <bool MASK>
__device__ __forceinline__ float score(const float (&s)[64], int i, int key0, int r_lo, int t, int S, int CAUSAL,
                                       float sl2, float sub)
{
    if (MASK) {
        const int key = key0 + 8 * (i / 4) + 2 * t + (i & 1), row = r_lo + 8 * ((i >> 1) & 1);
        if (key >= S || (CAUSAL && key > row)) return -__int_as_float(0x7f800000);  // -inf: exp2 gives 0
    }
    return fmaf(s[i], sl2, -sub);
}

// Online softmax of one tile for this thread's two rows (r_lo, r_hi = r_lo + 8), step 5's: s[4j + 2h + e] is row
// r_lo + 8h, key key0 + 8j + 2t + e. Moves m (log2 units) and l on, returns the factor a = 2^(m_old - m_new) for O,
// and leaves p = 2^(s - m) rounded to T as wgmma A fragments (pf[kk]: keys 16kk .. 16kk + 15).
template <bool MASK>
__device__ __forceinline__ void softmax_tile(const float (&s)[64], unsigned (&pf)[BN / 16][4], float& m_lo,
                                             float& m_hi, float& l_lo, float& l_hi, float& a_lo, float& a_hi,
                                             int key0, int r_lo, int t, int S, int CAUSAL, float sl2)
{
    float mx_lo = LOWEST, mx_hi = LOWEST;
    #pragma unroll
    for (int i = 0; i < 64; ++i) {
        const float x = score<MASK>(s, i, key0, r_lo, t, S, CAUSAL, sl2, 0.0f);
        if (i & 2) mx_hi = fmaxf(mx_hi, x); else mx_lo = fmaxf(mx_lo, x);
    }
    #pragma unroll
    for (int off = 1; off < 4; off <<= 1) {  // a row's 4 lanes (t) agree
        mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, off));
        mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, off));
    }
    const float mn_lo = fmaxf(m_lo, mx_lo), mn_hi = fmaxf(m_hi, mx_hi);
    a_lo = exp2_approx(m_lo - mn_lo);
    a_hi = exp2_approx(m_hi - mn_hi);
    m_lo = mn_lo;
    m_hi = mn_hi;
    l_lo *= a_lo;
    l_hi *= a_hi;
    #pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
        #pragma unroll
        for (int r = 0; r < 4; ++r) {  // register r: row lo/hi by r & 1, the second 8 keys by r >> 1
            const float mm = (r & 1) ? m_hi : m_lo;
            const int i = 8 * kk + 2 * r;
            const float p0 = exp2_approx(score<MASK>(s, i, key0, r_lo, t, S, CAUSAL, sl2, mm));
            const float p1 = exp2_approx(score<MASK>(s, i + 1, key0, r_lo, t, S, CAUSAL, sl2, mm));
            if (r & 1) l_hi += p0 + p1; else l_lo += p0 + p1;
            pf[kk][r] = pack2(p0, p1);
        }
    }
}

extern "C" __global__ void __launch_bounds__(384, 1) attention_ws(
    const T* q, const T* k, const T* v, T* o, int B, int H, int S, int D, int CAUSAL,
    const __grid_constant__ peak::TensorMap map_q, const __grid_constant__ peak::TensorMap map_k,
    const __grid_constant__ peak::TensorMap map_v)
{
    if (D != HD || !peak::tma_usable(map_q) || !peak::tma_usable(map_k) || !peak::tma_usable(map_v)) {
        fallback_rows(q, k, v, o, H, S, D, CAUSAL);
        return;
    }
    extern __shared__ unsigned char smem[];
    __shared__ __align__(8) unsigned long long q_full, k_full[STAGES], v_full[STAGES], k_empty[STAGES],
        v_empty[STAGES];
    const unsigned base = (peak::smem_addr(smem) + 1023) & ~1023u;  // the swizzle works on absolute address bits
    const unsigned Qs = base, Ks = base + TILE_BYTES, Vs = Ks + STAGES * TILE_BYTES;
    const int tid = threadIdx.x, wg = tid / 128;
    const int head = blockIdx.y, batch = blockIdx.z;
    const int qblock = CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // longest causal blocks first
    const int row0 = qblock * BM;
    const int last_key = CAUSAL ? min(S, row0 + BM) : S;  // keys past the block's last row: all masked
    const int tiles = (last_key + BN - 1) / BN;

    if (tid == 0) {
        peak::tma_prefetch(map_q);
        peak::tma_prefetch(map_k);
        peak::tma_prefetch(map_v);
        peak::mbar_init(peak::smem_addr(&q_full), 1);
        for (int s = 0; s < STAGES; ++s) {
            peak::mbar_init(peak::smem_addr(&k_full[s]), 1);
            peak::mbar_init(peak::smem_addr(&v_full[s]), 1);
            peak::mbar_init(peak::smem_addr(&k_empty[s]), CONSUMER_WARPS);
            peak::mbar_init(peak::smem_addr(&v_empty[s]), CONSUMER_WARPS);
        }
        peak::mbar_init_fence();
    }
    __syncthreads();  // the last block-wide barrier: from here the warpgroups meet on mbarriers and named barriers

    if (wg == 0) {  // producer: Q once, then K and V of each tile as soon as the consumers free its stage
        peak::setmaxnreg_dec<24>();
        if (tid == 0) {
            const unsigned qb = peak::smem_addr(&q_full);
            peak::mbar_arrive_expect_tx(qb, TILE_BYTES);
            for (int p = 0; p < 2; ++p) peak::tma_load_4d(Qs + p * PANEL, map_q, qb, 64 * p, row0, head, batch);
            for (int tile = 0; tile < tiles; ++tile) {
                const int st = tile % STAGES;
                const unsigned free_parity = ((tile / STAGES) & 1) ^ 1;  // the first round passes at once
                const unsigned kb = peak::smem_addr(&k_full[st]), vb = peak::smem_addr(&v_full[st]);
                peak::mbar_wait(peak::smem_addr(&k_empty[st]), free_parity);
                peak::mbar_arrive_expect_tx(kb, TILE_BYTES);
                for (int p = 0; p < 2; ++p)
                    peak::tma_load_4d(Ks + st * TILE_BYTES + p * PANEL, map_k, kb, 64 * p, tile * BN, head, batch);
                peak::mbar_wait(peak::smem_addr(&v_empty[st]), free_parity);
                peak::mbar_arrive_expect_tx(vb, TILE_BYTES);
                for (int p = 0; p < 2; ++p)
                    peak::tma_load_4d(Vs + st * TILE_BYTES + p * PANEL, map_v, vb, 64 * p, tile * BN, head, batch);
            }
        }
        return;
    }

    peak::setmaxnreg_inc<240>();
    const int c = wg - 1, ct = tid % 128, warp = ct / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int r_lo = row0 + c * 64 + warp * 16 + g;  // this thread's rows: r_lo and r_lo + 8
    const float sl2 = LOG2E / sqrtf((float)HD);       // scores in log2 units: exp2 is one ex2
    const bool leader = lane == 0;                    // one arrival per warp frees a stage

    // S = Q K^T for `tile` into s: this warpgroup's 64 rows of Q against the tile's 128 keys, both K-major; the first
    // k16 step overwrites s (scale-d 0), so s needs no zeroing. Issued, not waited for.
    auto issue_s = [&](float (&s)[64], int tile) {
        const int st = tile % STAGES;
        #pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
            const unsigned off = (kk / 4) * PANEL + (kk % 4) * 32;
            const unsigned long long da = peak::wgmma_desc_sw128(Qs + off + c * 64 * 128, 16, 1024);
            const unsigned long long db = peak::wgmma_desc_sw128(Ks + st * TILE_BYTES + off, 16, 1024);
            peak::wgmma_kmajor_m64n128k16(s, da, db, kk > 0, T());
        }
        peak::wgmma_commit();
    };
    // O += P V for `tile`: P from registers (A), V MN-major (B), its two 64-column panels PANEL bytes apart.
    auto issue_pv = [&](float (&acc)[64], const unsigned (&p)[BN / 16][4], int tile) {
        const int st = tile % STAGES;
        #pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            const unsigned long long db = peak::wgmma_desc_sw128(Vs + st * TILE_BYTES + kk * 16 * 128, PANEL, 1024);
            peak::wgmma_rs_m64n128k16(acc, p[kk], db, 1, T());
        }
        peak::wgmma_commit();
    };
    auto masked = [&](int tile) { return tile * BN + BN > S || (CAUSAL && tile * BN + BN > row0); };

    float of[64], sf[64];
    #pragma unroll
    for (int i = 0; i < 64; ++i) of[i] = sf[i] = 0.0f;
    unsigned pa[BN / 16][4], pb[BN / 16][4];  // P of the even and the odd tiles: one on the tensor cores, one made
    float m_lo = LOWEST, m_hi = LOWEST, l_lo = 0.0f, l_hi = 0.0f, a_lo, a_hi;
    auto softmax = [&](unsigned (&p)[BN / 16][4], int tile) {
        if (masked(tile))
            softmax_tile<true>(sf, p, m_lo, m_hi, l_lo, l_hi, a_lo, a_hi, tile * BN, r_lo, t, S, CAUSAL, sl2);
        else
            softmax_tile<false>(sf, p, m_lo, m_hi, l_lo, l_hi, a_lo, a_hi, tile * BN, r_lo, t, S, CAUSAL, sl2);
    };
    // One tile after the first: S of `tile` issued, then P V of the tile before (p_prev), the softmax of `tile`
    // into p_new while that P V runs, then O rescaled once it is done.
    auto step = [&](int tile, const unsigned (&p_prev)[BN / 16][4], unsigned (&p_new)[BN / 16][4]) {
        const int st = tile % STAGES, prev = tile - 1, pst = prev % STAGES;
        peak::mbar_wait(peak::smem_addr(&k_full[st]), (tile / STAGES) & 1);
        peak::mbar_wait(peak::smem_addr(&v_full[pst]), (prev / STAGES) & 1);
        if (PINGPONG) turn_wait(c);
        peak::wgmma_fence();
        issue_s(sf, tile);                 // S of this tile ...
        issue_pv(of, p_prev, prev);        // ... then the last tile's P V behind it
        if (PINGPONG && !(c == 1 && tile == tiles - 1)) turn_give(c);
        peak::wgmma_wait<1>();             // S is done (groups retire in order); P V may still run
        fence_operand(sf);
        if (leader) peak::mbar_arrive(peak::smem_addr(&k_empty[st]));
        softmax(p_new, tile);
        peak::wgmma_wait<0>();             // the last tile's P V is done: O may be rescaled, V's stage freed
        fence_operand(of);
        if (leader) peak::mbar_arrive(peak::smem_addr(&v_empty[pst]));
        #pragma unroll
        for (int i = 0; i < 64; ++i) of[i] *= (i & 2) ? a_hi : a_lo;
    };

    // tile 0: S and its softmax (O is zero: no rescale)
    peak::mbar_wait(peak::smem_addr(&q_full), 0);
    peak::mbar_wait(peak::smem_addr(&k_full[0]), 0);
    peak::wgmma_fence();
    issue_s(sf, 0);
    peak::wgmma_wait<0>();
    fence_operand(sf);
    if (leader) peak::mbar_arrive(peak::smem_addr(&k_empty[0]));
    softmax(pa, 0);
    if (PINGPONG && c == 1 && tiles > 1) turn_give(c);  // consumer 0 issues first

    int tile = 1;
    for (; tile + 1 < tiles; tile += 2) {  // two tiles a turn: each P buffer has a name, never an index
        step(tile, pa, pb);
        step(tile + 1, pb, pa);
    }
    if (tile < tiles) step(tile, pa, pb);
    const int last = tiles - 1;  // its P V: P in pa when it is even
    peak::mbar_wait(peak::smem_addr(&v_full[last % STAGES]), (last / STAGES) & 1);
    peak::wgmma_fence();
    if (last & 1)
        issue_pv(of, pb, last);
    else
        issue_pv(of, pa, last);
    peak::wgmma_wait<0>();
    fence_operand(of);

    #pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
        l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
    }
    const float inv_lo = 1.0f / l_lo, inv_hi = 1.0f / l_hi;
    T* oh = o + ((long long)batch * H + head) * S * HD;
    #pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
        const int col = j * 8 + 2 * t;
        if (r_lo < S)
            *reinterpret_cast<unsigned*>(oh + (long long)r_lo * HD + col) =
                pack2(of[4 * j] * inv_lo, of[4 * j + 1] * inv_lo);
        if (r_lo + 8 < S)
            *reinterpret_cast<unsigned*>(oh + (long long)(r_lo + 8) * HD + col) =
                pack2(of[4 * j + 2] * inv_hi, of[4 * j + 3] * inv_hi);
    }
}
