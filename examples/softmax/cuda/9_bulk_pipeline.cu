// Step 9, row-bulk-pipeline: step 8's exponentials (one ex2.approx.ftz each) over rows that persistent blocks
// (step 6) move into shared memory with Hopper's bulk asynchronous copy (cp.async.bulk, one instruction per row,
// completion counted in bytes on an mbarrier), STAGES rows in flight per block. Steps 7 and 8 keep the row in
// registers: their loads in flight per SM are their registers, in bursts (each block loads its whole row, then
// computes with nothing in flight). Here they are the shared slots: thread 0 keeps up to STAGES rows loading while
// the block computes the oldest one, whatever the registers.
// - Shared memory: partials and mbarriers (HEADER bytes), then the row slots. Slots = min(STAGES, what the launch's
//   dynamic shared memory holds): 227 KB at GRID = 132 (one block per SM) holds 7 slots of an 8192-column f32 row
//   (32 KB each), 14 of a bf16 one; STAGES = 8 keeps 7 x 32 KB (f32) or 8 x 16 KB (bf16) per SM, the row being
//   computed included.
// - Row k: wait for its slot's mbarrier; each thread's maximum over its vectors of the slot, then its sum of
//   exponentials (a second read of the slot: one exponential per element); one barrier for the block's merge
//   (partials double-buffered by row parity, as step 6); after it every thread has left row k - 1, so thread 0
//   refills that slot with row k - 1 + slots. Then y = exp2((x - max) log2 e) / sum from the slot: STORE=0 as
//   16-byte st.global from registers; STORE=1 in place into the slot, then one bulk store
//   (cp.async.bulk.global.shared::cta) issued by thread 0 after the next barrier, the slot refilled once that store
//   has read it (one slot fewer loading).
// - The bulk path needs sm_90, COLS * sizeof(T) a multiple of 16, x and y 16-byte aligned, and 2 slots (3 with
//   STORE=1). Anything else (older devices, odd COLS, rows beyond the shared memory) takes the generic path: the
//   same persistent loop reading the row twice from global memory (online max and sum, then the writing pass from
//   L2), 16-byte accesses where x and y share their alignment, scalar head and tail. Any ROWS, COLS >= 1.
// The launch asks for the most shared memory GRID / 132 blocks per SM may have (228 KB per SM, 1 KB of it reserved
// per block): GRID is for 132-SM devices (H100 SXM, H200); on a device with less shared memory per block, lower it.
// Not yet timed: the defaults are a guess for an H200 at 8192 x 8192.
// peak: entry=softmax_bulk grid=(min(ROWS, GRID), 1, 1) block=(BLOCK, 1, 1) shared=233472//cdiv(GRID,132)-1024
// peak: params GRID=[132, 264] BLOCK=[512, 256, 1024] STORE=[0, 1] STAGES=[8, 4, 3, 12]
// peak: where=STAGES >= 2 + STORE
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef float T;  // the session's dtype: float, __half or __nv_bfloat16 (the only line to change)

#define LOG2E 1.4426950408889634f
#define LOWEST (-3.402823466e38f)  // -FLT_MAX: merging two empty partials gives 0 * exp2(0), never NaN
#define WARPS (BLOCK / 32)
#define VEC ((int)(16 / sizeof(T)))  // elements per 16-byte access: 4 floats or 8 halves
#define HEADER 1024                  // partials (2 x 2 x 32 floats) at 0, mbarriers (8 bytes each) from 512
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define BULK 1  // cp.async.bulk and mbarrier transaction counts: sm_90 and newer
#else
#define BULK 0
#endif

// 2^x in one MUFU.EX2, denormal results flushed to 0 (2^-inf = 0: the merge of an empty partial stays finite).
__device__ __forceinline__ float exp2_ftz(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ void unpack(const uint4& raw, float (&f)[VEC])
{
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < VEC; ++j)
        f[j] = static_cast<float>(e[j]);
}

__device__ __forceinline__ uint4 pack(const float (&f)[VEC])
{
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int j = 0; j < VEC; ++j)
        e[j] = T(f[j]);
    return raw;
}

// Online softmax: fold VEC values into (m, s).
__device__ __forceinline__ void online(float& m, float& s, const float (&f)[VEC])
{
    float mv = f[0];
#pragma unroll
    for (int j = 1; j < VEC; ++j)
        mv = fmaxf(mv, f[j]);
    const float mn = fmaxf(m, mv);
    float add = 0.0f;
#pragma unroll
    for (int j = 0; j < VEC; ++j)
        add += exp2_ftz((f[j] - mn) * LOG2E);
    s = s * exp2_ftz((m - mn) * LOG2E) + add;
    m = mn;
}

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2)
{
    const float mn = fmaxf(m, m2);
    s = s * exp2_ftz((m - mn) * LOG2E) + s2 * exp2_ftz((m2 - mn) * LOG2E);  // symmetric: same bits in both lanes
    m = mn;
}

__device__ __forceinline__ void warp_merge(float& m, float& s)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        merge(m, s, m2, s2);
    }
}

// The block's (max, sum) of row k: one barrier, partials double-buffered by row parity (see step 6); every warp
// merges the partials in the same order, so every thread holds the same bits.
__device__ __forceinline__ void block_merge(float& m, float& s, float (*red)[32], int k)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    warp_merge(m, s);
    if (lane == 0) {
        red[2 * (k & 1)][warp] = m;
        red[2 * (k & 1) + 1][warp] = s;
    }
    __syncthreads();
    m = lane < WARPS ? red[2 * (k & 1)][lane] : LOWEST;
    s = lane < WARPS ? red[2 * (k & 1) + 1][lane] : 0.0f;
    warp_merge(m, s);
}

#if BULK
// Shared operands are 32-bit shared-window addresses.
__device__ __forceinline__ unsigned smem_addr(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ unsigned dynamic_smem_bytes()  // what the launch gave, whatever the annotation said
{
    unsigned n;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
    return n;
}

__device__ __forceinline__ void mbar_init(unsigned bar)  // one arrival (thread 0's expect_tx) per phase
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}

// Thread 0's arrival announcing `bytes`, then the copy that delivers them to the same barrier.
__device__ __forceinline__ void bulk_load(unsigned dst, const void* src, unsigned bytes, unsigned bar)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity)
{
    unsigned done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

__device__ __forceinline__ void bulk_store(void* dst, unsigned src, unsigned bytes)
{
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src), "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
#endif

// y for one vector: exp2((x - m) log2 e) / s.
__device__ __forceinline__ uint4 probabilities(const uint4& raw, float m, float inv)
{
    float f[VEC];
    unpack(raw, f);
#pragma unroll
    for (int j = 0; j < VEC; ++j)
        f[j] = exp2_ftz((f[j] - m) * LOG2E) * inv;
    return pack(f);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_bulk(const T* __restrict__ x, T* __restrict__ y, int ROWS, int COLS)
{
    extern __shared__ __align__(128) unsigned char smem[];
    float (*red)[32] = reinterpret_cast<float (*)[32]>(smem);  // [2 parity + 0]: maxima, [2 parity + 1]: sums
    const int tid = threadIdx.x;
#if BULK
    const size_t bytes = (size_t)COLS * sizeof(T), slot = (bytes + 127) / 128 * 128;
    const size_t room = dynamic_smem_bytes() > HEADER ? dynamic_smem_bytes() - HEADER : 0;
    const int slots = (int)min(room / slot, (size_t)STAGES);
    const bool aligned = ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(y) | bytes) & 15) == 0;
    if (aligned && slots >= 2 + STORE) {  // uniform over the block
        const unsigned bar0 = smem_addr(smem + 512), xs0 = smem_addr(smem + HEADER);  // slot s: bar0 + 8 s
        const int nvec = COLS / VEC;
        const long long stride = gridDim.x;
        if (tid == 0) {
            for (int s = 0; s < slots; ++s)
                mbar_init(bar0 + 8 * s);
            asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;" ::: "memory");
            for (int s = 0; s < slots && blockIdx.x + s * stride < ROWS; ++s)
                bulk_load(xs0 + s * (unsigned)slot, x + (blockIdx.x + s * stride) * COLS, (unsigned)bytes,
                          bar0 + 8 * s);
        }
        __syncthreads();  // the barriers are initialised before anyone waits on them
        int k = 0;
        for (long long row = blockIdx.x; row < ROWS; row += stride, ++k) {
            const int s = k % slots;
            mbar_wait(bar0 + 8 * s, (k / slots) & 1);
            uint4* xv = reinterpret_cast<uint4*>(smem + HEADER + s * slot);
            float m = LOWEST, sum = 0.0f;
#pragma unroll 4
            for (int i = tid; i < nvec; i += BLOCK) {  // this thread's maximum first: one exponential per element
                float f[VEC];
                unpack(xv[i], f);
#pragma unroll
                for (int j = 0; j < VEC; ++j)
                    m = fmaxf(m, f[j]);
            }
#pragma unroll 4
            for (int i = tid; i < nvec; i += BLOCK) {
                float f[VEC];
                unpack(xv[i], f);
#pragma unroll
                for (int j = 0; j < VEC; ++j)
                    sum += exp2_ftz((f[j] - m) * LOG2E);
            }
            block_merge(m, sum, red, k);
            const float inv = 1.0f / sum;
            if (tid == 0 && k > 0) {  // past the barrier every thread has finished row k - 1
#if STORE
                const int done = (k - 1) % slots;  // row k - 1's y is in its slot (and fenced): copy it out
                bulk_store(y + (row - stride) * COLS, xs0 + done * (unsigned)slot, (unsigned)bytes);
                asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");  // row k - 2's store has read its slot
                const int lag = 2;
#else
                const int lag = 1;
#endif
                const long long next = row + (slots - lag) * stride;  // row k - lag + slots into row k - lag's slot
                if (k >= lag && next < ROWS) {
                    const int free = (k - lag) % slots;
                    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the block's reads, then the copy
                    bulk_load(xs0 + free * (unsigned)slot, x + next * COLS, (unsigned)bytes, bar0 + 8 * free);
                }
            }
#if STORE
#pragma unroll 4
            for (int i = tid; i < nvec; i += BLOCK)
                xv[i] = probabilities(xv[i], m, inv);  // in place: each thread rewrites only what it read
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // before the bulk store reads the slot
#else
            uint4* yv = reinterpret_cast<uint4*>(y + row * COLS);
#pragma unroll 4
            for (int i = tid; i < nvec; i += BLOCK)
                yv[i] = probabilities(xv[i], m, inv);
#endif
        }
#if STORE
        __syncthreads();
        if (tid == 0 && k > 0) {  // the last row's y, and no copy outlives the block's shared memory
            bulk_store(y + (blockIdx.x + (k - 1) * stride) * COLS, xs0 + ((k - 1) % slots) * (unsigned)slot,
                       (unsigned)bytes);
            asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
        }
#endif
        return;
    }
#endif
    // Generic path: online max and sum over the row from global memory, then the writing pass (from L2), 16-byte
    // accesses where x and y share their alignment.
    const bool vec = ((reinterpret_cast<size_t>(x) ^ reinterpret_cast<size_t>(y)) & 15) == 0;
    int k = 0;
    for (long long row = blockIdx.x; row < ROWS; row += gridDim.x, ++k) {
        const T* xr = x + row * COLS;
        T* yr = y + row * COLS;
        const int head = vec ? (int)min((size_t)((16 - (reinterpret_cast<size_t>(xr) & 15)) & 15) / sizeof(T),
                                        (size_t)COLS) : COLS;
        const int nvec = (COLS - head) / VEC, tail = head + nvec * VEC;
        const uint4* xv = reinterpret_cast<const uint4*>(xr + head);
        uint4* yv = reinterpret_cast<uint4*>(yr + head);
        float m = LOWEST, sum = 0.0f;
        for (int c = tid; c < head; c += BLOCK)
            merge(m, sum, static_cast<float>(xr[c]), 1.0f);
#pragma unroll 4
        for (int i = tid; i < nvec; i += BLOCK) {
            float f[VEC];
            unpack(xv[i], f);
            online(m, sum, f);
        }
        for (int c = tail + tid; c < COLS; c += BLOCK)
            merge(m, sum, static_cast<float>(xr[c]), 1.0f);
        block_merge(m, sum, red, k);
        const float inv = 1.0f / sum;
        for (int c = tid; c < head; c += BLOCK)
            yr[c] = T(exp2_ftz((static_cast<float>(xr[c]) - m) * LOG2E) * inv);
#pragma unroll 4
        for (int i = tid; i < nvec; i += BLOCK)
            yv[i] = probabilities(xv[i], m, inv);
        for (int c = tail + tid; c < COLS; c += BLOCK)
            yr[c] = T(exp2_ftz((static_cast<float>(xr[c]) - m) * LOG2E) * inv);
    }
}
