// HIP header name (__hip_bfloat16, the CUDA-like bf16 API), for HIP kernels on NVIDIA: everything it offers device
// code is in hip_runtime.h.
#pragma once
#include "hip_runtime.h"
