// HIP header name, for HIP kernels on NVIDIA: everything it offers device code is in hip_runtime.h.
#pragma once
#include "hip_runtime.h"
