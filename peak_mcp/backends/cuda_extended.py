"""Launches cuda.core's `launch` does not cover on every installed version: TMA tensor maps as kernel parameters and
thread-block clusters. Both go through the driver's cuLaunchKernelEx with a parameter array built here.

Maps are encoded per buffer set (the timed loop rotates several) and cached by the buffers' addresses.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from peak_mcp.backends.tensor_maps import MAP_BYTES, TensorMapRequest

_MAP_TYPES = {"f32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32", "f16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
              "bf16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16"}
_SWIZZLES = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 32: "CU_TENSOR_MAP_SWIZZLE_32B", 64: "CU_TENSOR_MAP_SWIZZLE_64B",
             128: "CU_TENSOR_MAP_SWIZZLE_128B"}


def encode(request: TensorMapRequest, address: int, check: Any) -> bytes:
    """The 128-byte descriptor of `request` over the buffer at `address`; zeros where TMA cannot describe it."""
    if request.unencodable:
        return bytes(MAP_BYTES)
    from cuda.bindings import driver

    rank = len(request.shape)
    tensor_map = check(driver.cuTensorMapEncodeTiled(
        getattr(driver.CUtensorMapDataType, _MAP_TYPES[request.dtype]), rank, address,
        [driver.cuuint64_t(d) for d in reversed(request.shape)],  # the driver counts from the innermost dimension
        [driver.cuuint64_t(s) for s in request.strides],
        [driver.cuuint32_t(b) for b in reversed(request.box)],
        [driver.cuuint32_t(1)] * rank,
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(driver.CUtensorMapSwizzle, _SWIZZLES[request.swizzle]),
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE))  # NONE fills zeros
    return ctypes.string_at(tensor_map.getPtr(), MAP_BYTES)


@dataclass
class ExtendedLaunch:
    """A launch with tensor maps and/or a cluster shape; `maps` caches encoded descriptors per buffer set."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int
    cluster: tuple[int, int, int] | None
    requests: list[TensorMapRequest]
    maps: dict[tuple[int, ...], list[bytes]] = field(default_factory=dict)

    def descriptors(self, addresses: Sequence[int], check: Any) -> list[bytes]:
        key = tuple(addresses)
        if key not in self.maps:
            self.maps[key] = [encode(r, addresses[r.index], check) for r in self.requests]
        return self.maps[key]

    def launch(self, function: Any, stream_handle: Any, buffers: Sequence[Any], scalars: Sequence[int],
               check: Any) -> None:
        from cuda.bindings import driver

        addresses = [int(b) for b in buffers]
        values: list[Any] = [ctypes.c_uint64(a) for a in addresses]
        values += [ctypes.c_int32(s) for s in scalars]
        values += [ctypes.create_string_buffer(d, MAP_BYTES) for d in self.descriptors(addresses, check)]
        params = (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values))
        config = driver.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = self.grid
        config.blockDimX, config.blockDimY, config.blockDimZ = self.block
        config.sharedMemBytes = self.shared
        config.hStream = stream_handle
        if self.cluster is not None:
            attribute = driver.CUlaunchAttribute()
            attribute.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attribute.value.clusterDim.x, attribute.value.clusterDim.y, attribute.value.clusterDim.z = self.cluster
            config.attrs = [attribute]
            config.numAttrs = 1
        else:
            config.numAttrs = 0
        check(driver.cuLaunchKernelEx(config, function, ctypes.addressof(params), 0))
