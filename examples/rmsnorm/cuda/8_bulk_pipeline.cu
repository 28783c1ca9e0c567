// Step 8, row-bulk-pipeline: persistent blocks (step 6) that move whole rows into shared memory with Hopper's bulk
// asynchronous copy (cp.async.bulk, one instruction per row, completion counted in bytes on an mbarrier), STAGES
// rows in flight per block. Step 7 keeps its row in registers: its loads in flight per SM are its registers (at
// most 3 blocks x 256 threads x 8 x 16 bytes = 96 KB at f32, 24 warps), and they come in bursts, each block loading
// its whole row and then computing with nothing in flight. Here the loads in flight are the shared slots: thread 0
// keeps up to STAGES rows loading while the block computes the oldest one, whatever the registers.
// - Shared memory: partials and mbarriers (HEADER bytes), w (one row, loaded once per block by the same copy), then
//   the row slots. Slots = min(STAGES, what the launch's dynamic shared memory holds): 227 KB at GRID = 132 (one
//   block per SM) holds w and 6 slots of an 8192-column f32 row (32 KB each), 13 of a bf16 one; STAGES = 8 keeps
//   6 x 32 KB (f32) or 8 x 16 KB (bf16) per SM, the row being computed included.
// - Row k: wait for its slot's mbarrier; sum of squares from the slot; one barrier (partials double-buffered by
//   row parity, as step 6); after it every thread has left row k - 1, so thread 0 refills that slot with row
//   k - 1 + slots. Then y = x * r * w from the slot and w's slot: STORE=0 as 16-byte st.global from registers;
//   STORE=1 in place into the slot, then one bulk store (cp.async.bulk.global.shared::cta) issued by thread 0
//   after the next barrier, the slot refilled once that store has read it (one slot fewer loading).
// - The bulk path needs sm_90, COLS * sizeof(T) a multiple of 16, x, w and y 16-byte aligned, and 2 slots (3 with
//   STORE=1). Anything else (older devices, odd COLS, rows beyond the shared memory) takes the generic path: the
//   same persistent loop reading the row twice from global memory (the second pass from L2), 16-byte accesses
//   where x and y share their alignment, scalar head and tail. Any ROWS, COLS >= 1.
// The launch asks for the most shared memory GRID / 132 blocks per SM may have (228 KB per SM, 1 KB of it reserved
// per block): GRID is for 132-SM devices (H100 SXM, H200); on a device with less shared memory per block, lower it.
// Not yet timed: the defaults are a guess for an H200 at 8192 x 8192.
// peak: entry=rmsnorm_bulk grid=(min(ROWS, GRID), 1, 1) block=(BLOCK, 1, 1) shared=233472//cdiv(GRID,132)-1024
// peak: params GRID=[132, 264] BLOCK=[512, 256, 1024] STORE=[0, 1] STAGES=[8, 4, 3, 12]
// peak: where=STAGES >= 2 + STORE
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef float T;  // the session's dtype: float, __half or __nv_bfloat16 (the only line to change)

#define EPS 1e-6f
#define WARPS (BLOCK / 32)
#define VEC ((int)(16 / sizeof(T)))  // elements per 16-byte access: 4 floats or 8 halves
#define HEADER 1024                  // partials (2 x 32 floats) at 0, mbarriers (8 bytes each) from 256
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define BULK 1  // cp.async.bulk and mbarrier transaction counts: sm_90 and newer
#else
#define BULK 0
#endif

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

__device__ __forceinline__ float squares(const uint4& raw)
{
    float f[VEC], s = 0.0f;
    unpack(raw, f);
#pragma unroll
    for (int j = 0; j < VEC; ++j)
        s += f[j] * f[j];
    return s;
}

__device__ __forceinline__ uint4 scale(const uint4& raw, const float (&g)[VEC], float r)
{
    float f[VEC];
    unpack(raw, f);
#pragma unroll
    for (int j = 0; j < VEC; ++j)
        f[j] = f[j] * r * g[j];
    return pack(f);
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The block's sum of squares of row k: one barrier, partials double-buffered by row parity (see step 6).
__device__ __forceinline__ float block_sum(float v, float (*red)[32], int k)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_sum(v);
    if (lane == 0)
        red[k & 1][warp] = v;
    __syncthreads();
    return warp_sum(lane < WARPS ? red[k & 1][lane] : 0.0f);
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

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_bulk(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int ROWS, int COLS)
{
    extern __shared__ __align__(128) unsigned char smem[];
    float (*red)[32] = reinterpret_cast<float (*)[32]>(smem);
    const int tid = threadIdx.x;
#if BULK
    const size_t bytes = (size_t)COLS * sizeof(T), slot = (bytes + 127) / 128 * 128;
    const size_t room = dynamic_smem_bytes() > HEADER + slot ? dynamic_smem_bytes() - HEADER - slot : 0;  // after w
    const int slots = (int)min(room / slot, (size_t)STAGES);
    const bool aligned = ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(w) | reinterpret_cast<size_t>(y)
                           | bytes) & 15) == 0;
    if (aligned && slots >= 2 + STORE) {  // uniform over the block
        const unsigned bar0 = smem_addr(smem + 256), wbar = bar0 + 8 * slots;  // slot s: bar0 + 8 s
        const unsigned ws = smem_addr(smem + HEADER), xs0 = ws + (unsigned)slot;
        const uint4* wv = reinterpret_cast<const uint4*>(smem + HEADER);
        const int nvec = COLS / VEC;
        const long long stride = gridDim.x;
        if (tid == 0) {
            for (int s = 0; s <= slots; ++s)
                mbar_init(bar0 + 8 * s);
            asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;" ::: "memory");
            bulk_load(ws, w, (unsigned)bytes, wbar);
            for (int s = 0; s < slots && blockIdx.x + s * stride < ROWS; ++s)
                bulk_load(xs0 + s * (unsigned)slot, x + (blockIdx.x + s * stride) * COLS, (unsigned)bytes,
                          bar0 + 8 * s);
        }
        __syncthreads();  // the barriers are initialised before anyone waits on them
        mbar_wait(wbar, 0);
        int k = 0;
        for (long long row = blockIdx.x; row < ROWS; row += stride, ++k) {
            const int s = k % slots;
            mbar_wait(bar0 + 8 * s, (k / slots) & 1);
            uint4* xv = reinterpret_cast<uint4*>(smem + HEADER + (1 + s) * slot);
            float ss = 0.0f;
#pragma unroll 4
            for (int i = tid; i < nvec; i += BLOCK)
                ss += squares(xv[i]);
            const float r = rsqrtf(block_sum(ss, red, k) / COLS + EPS);
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
#if !STORE
            uint4* yv = reinterpret_cast<uint4*>(y + row * COLS);
#endif
#pragma unroll 4
            for (int i = tid; i < nvec; i += BLOCK) {
                float g[VEC];
                unpack(wv[i], g);
#if STORE
                xv[i] = scale(xv[i], g, r);  // in place: each thread rewrites only what it read
#else
                yv[i] = scale(xv[i], g, r);
#endif
            }
#if STORE
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // before the bulk store reads the slot
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
    // Generic path: the row read twice from global memory, 16-byte accesses where x and y share their alignment.
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
        float ss = 0.0f;
        for (int c = tid; c < head; c += BLOCK) {
            const float v = static_cast<float>(xr[c]);
            ss += v * v;
        }
#pragma unroll 4
        for (int i = tid; i < nvec; i += BLOCK)
            ss += squares(xv[i]);
        for (int c = tail + tid; c < COLS; c += BLOCK) {
            const float v = static_cast<float>(xr[c]);
            ss += v * v;
        }
        const float r = rsqrtf(block_sum(ss, red, k) / COLS + EPS);
        for (int c = tid; c < head; c += BLOCK)
            yr[c] = T(static_cast<float>(xr[c]) * r * static_cast<float>(w[c]));
#pragma unroll 2
        for (int i = tid; i < nvec; i += BLOCK) {
            float g[VEC];
#pragma unroll
            for (int j = 0; j < VEC; ++j)
                g[j] = static_cast<float>(w[head + i * VEC + j]);
            yv[i] = scale(xv[i], g, r);
        }
        for (int c = tail + tid; c < COLS; c += BLOCK)
            yr[c] = T(static_cast<float>(xr[c]) * r * static_cast<float>(w[c]));
    }
}
