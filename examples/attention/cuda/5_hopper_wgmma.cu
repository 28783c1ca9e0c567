// Step 5, Hopper (sm_90a): step 4's algorithm on the warpgroup tensor-core instructions. A block of two warpgroups
// takes BM = 128 query rows (64 per warpgroup) and walks key tiles of BN = 128: S = Q K^T is one wgmma batch per
// tile with both operands in shared memory (K row-major is B "K-major"), and O += P V takes P straight from the
// registers S was accumulated in (wgmma's register-A form: an m64n128 f32 accumulator rounded in pairs is the A
// fragment) and V as an MN-major B, so P never touches shared memory and V needs no transpose. Q, K and V tiles
// arrive by TMA (4-D maps over B x H x S x D, 128-byte swizzle, two 64-column panels per 128-row tile) on
// mbarriers: K and V of the next tile are in flight while this one is multiplied, V on its own barrier so S = Q K^T
// starts when K lands. The causal tile skipping (and the longest-blocks-first order) is step 4's. D != 128, or a
// size TMA cannot map, takes step 4's per-row fallback in the same kernel.
// peak: entry=attention_hopper grid=(cdiv(S, 128), H, B) block=(256, 1, 1) shared=164864
// peak: tensor_map q box=(1, 1, 128, 64) swizzle=128
// peak: tensor_map k box=(1, 1, 128, 64) swizzle=128
// peak: tensor_map v box=(1, 1, 128, 64) swizzle=128
#include <peak/hopper.cuh>

typedef float T;  // the session's dtype: __nv_bfloat16 or __half (the only line to change; 16-bit only)
static_assert(sizeof(T) == 2, "the attention ladder takes f16 or bf16 sessions");

#define HD 128   // the head dimension of the fast path; any other D takes the per-row fallback below
#define BM 128   // query rows per block: 64 per warpgroup
#define BN 128   // keys per tile
#define STAGES 2
#define PANEL 16384                // bytes of one 128-row x 64-column panel (one TMA box)
#define TILE_BYTES (2 * PANEL)     // a 128 x 128 tile of Q, K or V
#define LOWEST (-3.402823466e38f)
#define LOG2E 1.4426950408889634f

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

// Online softmax of one tile for this thread's two rows (r_lo, r_hi = r_lo + 8). s is the m64n128 accumulator:
// s[4j + 2h + e] is row r_lo + 8h, key key0 + 8j + 2t + e. Moves the running max m (log2 units) and sum l on,
// returns the factor a = 2^(m_old - m_new) by which the caller rescales O, and leaves p = 2^(s - m) rounded to T
// as wgmma A fragments: pf[kk] covers keys 16kk .. 16kk + 15. MASK: the tile crosses the diagonal or S, so each
// score is tested (-inf for key >= S, or key > row when causal).
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

// Online softmax of one tile for this thread's two rows (r_lo, r_hi = r_lo + 8). s is the m64n128 accumulator:
// s[4j + 2h + e] is row r_lo + 8h, key key0 + 8j + 2t + e. Moves the running max m (log2 units) and sum l on,
// returns the factor a = 2^(m_old - m_new) by which the caller rescales O, and leaves p = 2^(s - m) rounded to T
// as wgmma A fragments: pf[kk] covers keys 16kk .. 16kk + 15. s is only read (a wgmma accumulator written by other
// instructions would serialize the wgmma pipeline). MASK: the tile crosses the diagonal or S, so each score is
// tested (-inf for key >= S, or key > row when causal).
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

extern "C" __global__ void __launch_bounds__(256, 1) attention_hopper(
    const T* q, const T* k, const T* v, T* o, int B, int H, int S, int D, int CAUSAL,
    const __grid_constant__ peak::TensorMap map_q, const __grid_constant__ peak::TensorMap map_k,
    const __grid_constant__ peak::TensorMap map_v)
{
    if (D != HD || !peak::tma_usable(map_q) || !peak::tma_usable(map_k) || !peak::tma_usable(map_v)) {
        fallback_rows(q, k, v, o, H, S, D, CAUSAL);
        return;
    }
    extern __shared__ unsigned char smem[];
    __shared__ __align__(8) unsigned long long q_full, k_full[STAGES], v_full[STAGES];
    const unsigned base = (peak::smem_addr(smem) + 1023) & ~1023u;  // the swizzle works on absolute address bits
    const unsigned Qs = base, Ks = base + TILE_BYTES, Vs = Ks + STAGES * TILE_BYTES;
    const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int head = blockIdx.y, batch = blockIdx.z;
    const int qblock = CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // longest causal blocks first
    const int row0 = qblock * BM;
    const int last_key = CAUSAL ? min(S, row0 + BM) : S;  // keys past the block's last row: all masked
    const int tiles = (last_key + BN - 1) / BN;

    // One thread issues every copy: a tile is two 64-column boxes; a barrier completes when all its bytes land.
    auto load_kv = [&](int tile) {
        const int st = tile % STAGES;
        const unsigned kb = peak::smem_addr(&k_full[st]), vb = peak::smem_addr(&v_full[st]);
        peak::mbar_arrive_expect_tx(kb, TILE_BYTES);
        peak::mbar_arrive_expect_tx(vb, TILE_BYTES);
        for (int p = 0; p < 2; ++p)
            peak::tma_load_4d(Ks + st * TILE_BYTES + p * PANEL, map_k, kb, 64 * p, tile * BN, head, batch);
        for (int p = 0; p < 2; ++p)
            peak::tma_load_4d(Vs + st * TILE_BYTES + p * PANEL, map_v, vb, 64 * p, tile * BN, head, batch);
    };
    if (tid == 0) {
        peak::tma_prefetch(map_q);
        peak::tma_prefetch(map_k);
        peak::tma_prefetch(map_v);
        peak::mbar_init(peak::smem_addr(&q_full), 1);
        for (int s = 0; s < STAGES; ++s) {
            peak::mbar_init(peak::smem_addr(&k_full[s]), 1);
            peak::mbar_init(peak::smem_addr(&v_full[s]), 1);
        }
        peak::mbar_init_fence();
    }
    __syncthreads();
    if (tid == 0) {
        const unsigned qb = peak::smem_addr(&q_full);
        peak::mbar_arrive_expect_tx(qb, TILE_BYTES);
        for (int p = 0; p < 2; ++p) peak::tma_load_4d(Qs + p * PANEL, map_q, qb, 64 * p, row0, head, batch);
        load_kv(0);
    }

    const int r_lo = row0 + wg * 64 + warp * 16 + g;  // this thread's rows: r_lo and r_lo + 8
    const float sl2 = LOG2E / sqrtf((float)HD);        // scores in log2 units: exp2 is one ex2
    float of[64];
    #pragma unroll
    for (int i = 0; i < 64; ++i) of[i] = 0.0f;
    float m_lo = LOWEST, m_hi = LOWEST, l_lo = 0.0f, l_hi = 0.0f;
    peak::mbar_wait(peak::smem_addr(&q_full), 0);
    for (int tile = 0; tile < tiles; ++tile) {
        const int st = tile % STAGES, key0 = tile * BN;
        const unsigned parity = (tile / STAGES) & 1;
        __syncthreads();  // both warpgroups are done with tile - 1: its stage may be refilled
        if (tid == 0 && tile + 1 < tiles) load_kv(tile + 1);

        // S = Q K^T: this warpgroup's 64 rows of Q (A, K-major) against the tile's 128 keys (B, K-major), 8 k16 steps
        // of 32 bytes along the swizzled rows; the second 64 columns of d are the second panel.
        float sf[64];
        #pragma unroll
        for (int i = 0; i < 64; ++i) sf[i] = 0.0f;
        peak::mbar_wait(peak::smem_addr(&k_full[st]), parity);
        peak::wgmma_fence();
        #pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
            const unsigned off = (kk / 4) * PANEL + (kk % 4) * 32;
            const unsigned long long da = peak::wgmma_desc_sw128(Qs + off + wg * 64 * 128, 16, 1024);
            const unsigned long long db = peak::wgmma_desc_sw128(Ks + st * TILE_BYTES + off, 16, 1024);
            peak::wgmma_kmajor_m64n128k16(sf, da, db, 1, T());
        }
        peak::wgmma_commit();
        peak::wgmma_wait<0>();

        unsigned pf[BN / 16][4];
        float a_lo, a_hi;
        if (key0 + BN > S || (CAUSAL && key0 + BN > row0))  // only the diagonal and past-S tiles pay for the mask
            softmax_tile<true>(sf, pf, m_lo, m_hi, l_lo, l_hi, a_lo, a_hi, key0, r_lo, t, S, CAUSAL, sl2);
        else
            softmax_tile<false>(sf, pf, m_lo, m_hi, l_lo, l_hi, a_lo, a_hi, key0, r_lo, t, S, CAUSAL, sl2);
        #pragma unroll
        for (int i = 0; i < 64; ++i) of[i] *= (i & 2) ? a_hi : a_lo;

        // O += P V: P from registers (A), V's 16 keys x 128 columns per step as an MN-major B: k16 step kk starts
        // 16 rows (2048 bytes) on, the two 64-column panels are PANEL bytes apart (the descriptor's lbo).
        peak::mbar_wait(peak::smem_addr(&v_full[st]), parity);
        peak::wgmma_fence();
        #pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            const unsigned long long db = peak::wgmma_desc_sw128(Vs + st * TILE_BYTES + kk * 16 * 128, PANEL, 1024);
            peak::wgmma_rs_m64n128k16(of, pf[kk], db, 1, T());
        }
        peak::wgmma_commit();
        peak::wgmma_wait<0>();
    }

    #pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
        l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
    }
    const float inv_lo = 1.0f / l_lo, inv_hi = 1.0f / l_hi;
    T* oh = o + ((long long)batch * H + head) * S * HD;
    #pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
        const int c = j * 8 + 2 * t;
        if (r_lo < S)
            *reinterpret_cast<unsigned*>(oh + (long long)r_lo * HD + c) = pack2(of[4 * j] * inv_lo, of[4 * j + 1] * inv_lo);
        if (r_lo + 8 < S)
            *reinterpret_cast<unsigned*>(oh + (long long)(r_lo + 8) * HD + c) =
                pack2(of[4 * j + 2] * inv_hi, of[4 * j + 3] * inv_hi);
    }
}
