// Step 3, K/V tiles through shared memory with a cp.async pipeline: step 2's tensor-core tile loop, with each K
// and V tile copied global -> shared by cp.async.cg (16 bytes per instruction, no registers, L1 bypassed) one tile
// ahead: tile t+1 is in flight while the warps multiply tile t (two stages, 68 KB of dynamic shared memory, two
// blocks per SM). One wait and one barrier per tile instead of step 2's load-store-barrier round trip; keys past S
// are zero-filled by the copy's source size 0 and masked. Causal tiles are still all visited and masked.
// D == 128 only on this path; any other D takes the per-row fallback.
// peak: entry=attention_pipelined grid=(cdiv(S, 64), H, B) block=(128, 1, 1) shared=69632
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef float T;  // the session's dtype: __nv_bfloat16 or __half (the only line to change; 16-bit only)
static_assert(sizeof(T) == 2, "the attention ladder takes f16 or bf16 sessions");

#define HD 128   // the head dimension of the fast path; any other D takes the per-row fallback below
#define BM 64    // query rows per block
#define LOWEST (-3.402823466e38f)

__device__ __forceinline__ float to_f(T x) { return static_cast<float>(x); }

// Any D (and what the fast path does not take): the naive kernel's algorithm, one thread per query row of this
// block's BM rows: a pass for the row max and sum, then 32 output columns per pass over the keys.
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

#define LOG2E 1.4426950408889634f

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

// c (16x8, f32) += a (16x16, row) * b (16x8, col): one warp-wide tensor-core product.
__device__ __forceinline__ void mma16816(float* c, const unsigned* a, unsigned b0, unsigned b1)
{
    if constexpr (is_half<T>())
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned* r, const void* smem)
{
    unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, const void* smem)
{
    unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

__device__ __forceinline__ float exp2_approx(float x)  // ex2.approx: 2^-inf = 0
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ unsigned load_pair(const T* p) { return *reinterpret_cast<const unsigned*>(p); }

#define BN 64          // keys per tile
#define LDS (HD + 8)   // padded shared row (272 bytes): the 8 rows of an ldmatrix phase fall in distinct banks
#define TILE (BN * LDS)
#define STAGES 2       // K/V tiles in flight: the next is copied while this one is multiplied

__device__ __forceinline__ void cp_async16(T* dst, const T* src, bool valid)
{
    unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");  // source size 0: the 16 bytes are zero-filled (keys past S)
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Tile `key0` of K and V into stage buffers Kd, Vd: 16-byte copies that bypass registers (and L1: .cg).
__device__ __forceinline__ void copy_tile(T* Kd, T* Vd, const T* kh, const T* vh, int key0, int S)
{
    for (int c = threadIdx.x; c < BN * HD / 8; c += blockDim.x) {
        const int r = c / (HD / 8), col = (c % (HD / 8)) * 8;
        const bool valid = key0 + r < S;
        const long long at = valid ? (long long)(key0 + r) * HD + col : 0;
        cp_async16(Kd + r * LDS + col, kh + at, valid);
        cp_async16(Vd + r * LDS + col, vh + at, valid);
    }
    cp_async_commit();
}

extern "C" __global__ void __launch_bounds__(128) attention_pipelined(const T* q, const T* k, const T* v, T* o, int B, int H,
                                                                 int S, int D, int CAUSAL)
{
    if (D != HD) { fallback_rows(q, k, v, o, H, S, D, CAUSAL); return; }
    extern __shared__ __align__(16) unsigned char smem[];
    T* Ks = reinterpret_cast<T*>(smem);  // STAGES K tiles, then STAGES V tiles
    T* Vs = Ks + STAGES * TILE;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const long long head = ((long long)blockIdx.z * H + blockIdx.y) * S * HD;
    const T* qh = q + head;
    const T* kh = k + head;
    const T* vh = v + head;
    const int qblock = blockIdx.x;  // which BM query rows this block takes
    const int r_lo = qblock * BM + warp * 16 + g;   // this lane's two rows of the warp's 16
    const int r_hi = r_lo + 8;
    // q as mma A fragments, held in registers for the whole pass: HD/16 k-steps of 4 registers.
    unsigned qf[HD / 16][4];
    #pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
        int c = kk * 16 + 2 * t;
        qf[kk][0] = r_lo < S ? load_pair(qh + (long long)r_lo * HD + c) : 0u;
        qf[kk][1] = r_hi < S ? load_pair(qh + (long long)r_hi * HD + c) : 0u;
        qf[kk][2] = r_lo < S ? load_pair(qh + (long long)r_lo * HD + c + 8) : 0u;
        qf[kk][3] = r_hi < S ? load_pair(qh + (long long)r_hi * HD + c + 8) : 0u;
    }
    float of[HD / 8][4];
    #pragma unroll
    for (int nt = 0; nt < HD / 8; ++nt) of[nt][0] = of[nt][1] = of[nt][2] = of[nt][3] = 0.0f;
    float m_lo = LOWEST, m_hi = LOWEST, l_lo = 0.0f, l_hi = 0.0f;  // running max (log2 units) and sum
    const float sl2 = LOG2E / sqrtf((float)HD);                    // scores in log2 units: exp2 is one ex2
    const int tiles = (S + BN - 1) / BN;
    copy_tile(Ks, Vs, kh, vh, 0, S);
    for (int tile = 0; tile < tiles; ++tile) {
        const int key0 = tile * BN;
        cp_async_wait_all();
        __syncthreads();  // tile `tile` has landed for every thread, and every warp is done with tile - 1
        if (tile + 1 < tiles)
            copy_tile(Ks + ((tile + 1) % STAGES) * TILE, Vs + ((tile + 1) % STAGES) * TILE, kh, vh, key0 + BN, S);
        const T* Kt = Ks + (tile % STAGES) * TILE;
        const T* Vt = Vs + (tile % STAGES) * TILE;
        const bool masked = true;
        // s = q k^T for this warp's 16 rows and the tile's BN keys: BN/8 accumulators of 16 x 8.
        float sf[BN / 8][4];
        #pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) sf[nt][0] = sf[nt][1] = sf[nt][2] = sf[nt][3] = 0.0f;
        #pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
            #pragma unroll
            for (int nt = 0; nt < BN / 8; nt += 2) {  // ldmatrix.x4: keys of two n-tiles, both halves of k16
                unsigned b[4];
                const int mi = lane >> 3;
                ldmatrix_x4(b, Kt + (nt * 8 + (mi >> 1) * 8 + (lane & 7)) * LDS + kk * 16 + (mi & 1) * 8);
                mma16816(sf[nt], qf[kk], b[0], b[1]);
                mma16816(sf[nt + 1], qf[kk], b[2], b[3]);
            }
        }
        // Online softmax on the tile: the lane's rows g and g+8; a row's 4 lanes (t) agree through 2 shuffles.
        float mx_lo = LOWEST, mx_hi = LOWEST;
        #pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) {
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
                float s = sf[nt][e] * sl2;
                if (masked) {
                    const int key = key0 + nt * 8 + 2 * t + (e & 1);
                    const int row = e < 2 ? r_lo : r_hi;
                    if (key >= S || (CAUSAL && key > row)) s = -__int_as_float(0x7f800000);  // -inf: exp2 gives 0
                }
                sf[nt][e] = s;
                if (e < 2) mx_lo = fmaxf(mx_lo, s); else mx_hi = fmaxf(mx_hi, s);
            }
        }
        #pragma unroll
        for (int off = 1; off < 4; off <<= 1) {
            mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, off));
            mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, off));
        }
        const float mn_lo = fmaxf(m_lo, mx_lo), mn_hi = fmaxf(m_hi, mx_hi);
        const float a_lo = exp2_approx(m_lo - mn_lo), a_hi = exp2_approx(m_hi - mn_hi);
        m_lo = mn_lo;
        m_hi = mn_hi;
        l_lo *= a_lo;
        l_hi *= a_hi;
        #pragma unroll
        for (int nt = 0; nt < HD / 8; ++nt) {
            of[nt][0] *= a_lo; of[nt][1] *= a_lo;
            of[nt][2] *= a_hi; of[nt][3] *= a_hi;
        }
        // p = 2^(s - m), rounded to T as the A operand of p v: two 16x8 accumulators are one 16x16 A fragment.
        unsigned pf[BN / 16][4];
        #pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) {
            float p0 = exp2_approx(sf[nt][0] - m_lo), p1 = exp2_approx(sf[nt][1] - m_lo);
            float p2 = exp2_approx(sf[nt][2] - m_hi), p3 = exp2_approx(sf[nt][3] - m_hi);
            l_lo += p0 + p1;
            l_hi += p2 + p3;
            pf[nt / 2][(nt & 1) * 2] = pack2(p0, p1);
            pf[nt / 2][(nt & 1) * 2 + 1] = pack2(p2, p3);
        }
        // o += p v: v's rows are keys (k), its columns d (n); ldmatrix.trans turns the row-major tile into the
        // k-pairs mma wants.
        #pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            #pragma unroll
            for (int np = 0; np < HD / 16; ++np) {
                unsigned b[4];
                const int mi = lane >> 3;
                ldmatrix_x4_trans(b, Vt + (kk * 16 + (mi & 1) * 8 + (lane & 7)) * LDS + np * 16 + (mi >> 1) * 8);
                mma16816(of[2 * np], pf[kk], b[0], b[1]);
                mma16816(of[2 * np + 1], pf[kk], b[2], b[3]);
            }
        }
    }
    #pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
        l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
    }
    const float inv_lo = 1.0f / l_lo, inv_hi = 1.0f / l_hi;
    T* oh = o + head;
    #pragma unroll
    for (int nt = 0; nt < HD / 8; ++nt) {
        const int c = nt * 8 + 2 * t;
        if (r_lo < S) *reinterpret_cast<unsigned*>(oh + (long long)r_lo * HD + c) = pack2(of[nt][0] * inv_lo, of[nt][1] * inv_lo);
        if (r_hi < S) *reinterpret_cast<unsigned*>(oh + (long long)r_hi * HD + c) = pack2(of[nt][2] * inv_hi, of[nt][3] * inv_hi);
    }
}
