// HIP's kernel-side API on CUDA, for NVRTC: what HIP's NVIDIA platform gives device code, written for peak-mcp
// because the HIP 5.x NVIDIA headers no longer compile under CUDA 13 (removed cudaDeviceProp fields).
// Device code only: the server owns allocation and launches, so no hipMalloc/hipLaunchKernelGGL here.
// CUDA already spells most of HIP's kernel language the same way (threadIdx, blockIdx, __global__, __shared__,
// __syncthreads, __launch_bounds__, atomicAdd, __half); this header adds HIP's own names on top.
#pragma once

#define __HIP_PLATFORM_NVIDIA__ 1
#define __HIP_PLATFORM_NVCC__ 1
#define __HIPCC__ 1
#if defined(__CUDA_ARCH__)
#define __HIP_DEVICE_COMPILE__ 1
#endif

#include <cuda_fp16.h>
#include <cuda_bf16.h>

// --- indices (HIP's older spelling) ------------------------------------------------------------------------
#define hipThreadIdx_x threadIdx.x
#define hipThreadIdx_y threadIdx.y
#define hipThreadIdx_z threadIdx.z
#define hipBlockIdx_x blockIdx.x
#define hipBlockIdx_y blockIdx.y
#define hipBlockIdx_z blockIdx.z
#define hipBlockDim_x blockDim.x
#define hipBlockDim_y blockDim.y
#define hipBlockDim_z blockDim.z
#define hipGridDim_x gridDim.x
#define hipGridDim_y gridDim.y
#define hipGridDim_z gridDim.z

// --- declarations --------------------------------------------------------------------------------------------
#define HIP_KERNEL_NAME(...) __VA_ARGS__
#define HIP_DYNAMIC_SHARED(type, var) extern __shared__ type var[];
#define HIP_DYNAMIC_SHARED_ATTRIBUTE
// HIP's second __launch_bounds__ argument is the minimum waves per execution unit, CUDA's the minimum blocks per
// SM; both only bound registers, so CUDA's reading is kept (a kernel stays correct either way).

// --- types ---------------------------------------------------------------------------------------------------
// Same 16-bit layouts as HIP's: buffers of either hold the same bits.
typedef __nv_bfloat16 hip_bfloat16;
typedef __nv_bfloat16 __hip_bfloat16;
typedef __nv_bfloat162 __hip_bfloat162;

// --- warp functions: HIP's have no mask and act on the whole warp --------------------------------------------
// CUDA still declares mask-free __any/__all/__ballot (invalid from sm_70 on) and, for old targets, __shfl*; HIP's
// names are macros onto functions of this header's own, so no declaration of CUDA's can clash with them.
#define __PEAK_HIP_FULL_MASK 0xffffffffu

template <typename T>
__device__ __forceinline__ T __peak_hip_shfl(T var, int src_lane, int width = warpSize) {
    return __shfl_sync(__PEAK_HIP_FULL_MASK, var, src_lane, width);
}
template <typename T>
__device__ __forceinline__ T __peak_hip_shfl_up(T var, unsigned int delta, int width = warpSize) {
    return __shfl_up_sync(__PEAK_HIP_FULL_MASK, var, delta, width);
}
template <typename T>
__device__ __forceinline__ T __peak_hip_shfl_down(T var, unsigned int delta, int width = warpSize) {
    return __shfl_down_sync(__PEAK_HIP_FULL_MASK, var, delta, width);
}
template <typename T>
__device__ __forceinline__ T __peak_hip_shfl_xor(T var, int lane_mask, int width = warpSize) {
    return __shfl_xor_sync(__PEAK_HIP_FULL_MASK, var, lane_mask, width);
}
__device__ __forceinline__ int __peak_hip_any(int predicate) { return __any_sync(__PEAK_HIP_FULL_MASK, predicate); }
__device__ __forceinline__ int __peak_hip_all(int predicate) { return __all_sync(__PEAK_HIP_FULL_MASK, predicate); }
// HIP's ballot is 64 bits wide (wave64); on a 32-lane warp the upper half is zero.
__device__ __forceinline__ unsigned long long __peak_hip_ballot(int predicate) {
    return __ballot_sync(__PEAK_HIP_FULL_MASK, predicate);
}
#define __shfl(...) __peak_hip_shfl(__VA_ARGS__)
#define __shfl_up(...) __peak_hip_shfl_up(__VA_ARGS__)
#define __shfl_down(...) __peak_hip_shfl_down(__VA_ARGS__)
#define __shfl_xor(...) __peak_hip_shfl_xor(__VA_ARGS__)
#define __any(predicate) __peak_hip_any(predicate)
#define __all(predicate) __peak_hip_all(predicate)
#define __ballot(predicate) __peak_hip_ballot(predicate)

__device__ __forceinline__ unsigned int __lane_id() {
    unsigned int lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane;
}

// --- atomics: HIP's extra names for atomicAdd ------------------------------------------------------------------
template <typename T>
__device__ __forceinline__ T unsafeAtomicAdd(T* address, T value) { return atomicAdd(address, value); }
template <typename T>
__device__ __forceinline__ T safeAtomicAdd(T* address, T value) { return atomicAdd(address, value); }
template <typename T>
__device__ __forceinline__ void atomicAddNoRet(T* address, T value) { (void)atomicAdd(address, value); }
