"""CUDA occupancy: a small calculator over the device's limits (per-SM registers, shared memory, warps, blocks)."""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import BaseModel

from peak_mcp.core.devices import Device
from peak_mcp.evaluation.profiling.report import Occupancy


class CudaLimits(BaseModel):
    """Per-SM limits of one compute capability, with the allocation rules the occupancy calculator uses."""

    arch: str
    warp_size: int = 32
    max_threads_per_sm: int
    max_blocks_per_sm: int
    max_threads_per_block: int = 1024
    registers_per_sm: int = 65536
    max_registers_per_block: int = 65536
    register_unit: int = 256  # registers are given to a warp in multiples of this
    register_partitions: int = 4  # the register file is split among the SM's 4 schedulers
    shared_per_sm_bytes: int
    shared_per_block_optin_bytes: int
    reserved_shared_per_block_bytes: int = 0  # set aside by the system for every resident block (sm_80+)
    shared_unit: int = 128  # shared memory is given to a block in multiples of this
    source: str = "table"


# From the CUDA C++ Programming Guide's "Technical Specifications per Compute Capability" table and the
# cudaDevAttrReservedSharedMemoryPerBlock attribute (1 KiB from compute capability 8.0 on). Shared memory per SM
# is the largest carveout; the driver picks the carveout per kernel (by default as large as the kernel needs).
_KIB = 1024


_CUDA_TABLE: dict[str, dict[str, int]] = {
    "sm_70": dict(max_threads_per_sm=2048, max_blocks_per_sm=32, shared_per_sm_bytes=96 * _KIB,
                  shared_per_block_optin_bytes=96 * _KIB, reserved_shared_per_block_bytes=0, shared_unit=256),
    "sm_75": dict(max_threads_per_sm=1024, max_blocks_per_sm=16, shared_per_sm_bytes=64 * _KIB,
                  shared_per_block_optin_bytes=64 * _KIB, reserved_shared_per_block_bytes=0, shared_unit=256),
    "sm_80": dict(max_threads_per_sm=2048, max_blocks_per_sm=32, shared_per_sm_bytes=164 * _KIB,
                  shared_per_block_optin_bytes=163 * _KIB, reserved_shared_per_block_bytes=_KIB),
    "sm_86": dict(max_threads_per_sm=1536, max_blocks_per_sm=16, shared_per_sm_bytes=100 * _KIB,
                  shared_per_block_optin_bytes=99 * _KIB, reserved_shared_per_block_bytes=_KIB),
    "sm_87": dict(max_threads_per_sm=2048, max_blocks_per_sm=16, shared_per_sm_bytes=164 * _KIB,
                  shared_per_block_optin_bytes=163 * _KIB, reserved_shared_per_block_bytes=_KIB),
    "sm_89": dict(max_threads_per_sm=1536, max_blocks_per_sm=24, shared_per_sm_bytes=100 * _KIB,
                  shared_per_block_optin_bytes=99 * _KIB, reserved_shared_per_block_bytes=_KIB),
    "sm_90": dict(max_threads_per_sm=2048, max_blocks_per_sm=32, shared_per_sm_bytes=228 * _KIB,
                  shared_per_block_optin_bytes=227 * _KIB, reserved_shared_per_block_bytes=_KIB),
    "sm_100": dict(max_threads_per_sm=2048, max_blocks_per_sm=32, shared_per_sm_bytes=228 * _KIB,
                   shared_per_block_optin_bytes=227 * _KIB, reserved_shared_per_block_bytes=_KIB),
    "sm_120": dict(max_threads_per_sm=1536, max_blocks_per_sm=32, shared_per_sm_bytes=100 * _KIB,
                   shared_per_block_optin_bytes=99 * _KIB, reserved_shared_per_block_bytes=_KIB),
}


# cuda.core DeviceProperties names -> CudaLimits fields: detected values replace the table's.
_DETECTED = {"warp_size": "warp_size", "max_threads_per_multiprocessor": "max_threads_per_sm",
             "max_blocks_per_multiprocessor": "max_blocks_per_sm", "max_threads_per_block": "max_threads_per_block",
             "max_registers_per_multiprocessor": "registers_per_sm",
             "max_registers_per_block": "max_registers_per_block",
             "max_shared_memory_per_multiprocessor": "shared_per_sm_bytes",
             "max_shared_memory_per_block_optin": "shared_per_block_optin_bytes",
             "reserved_shared_memory_per_block": "reserved_shared_per_block_bytes"}


def cuda_limits(arch: str, detected: dict[str, Any] | None = None) -> CudaLimits | None:
    """Limits for an NVRTC target (sm_90a reads as sm_90), overridden by what a live device reports; None when
    the architecture is not in the table and nothing was detected."""
    base = re.sub(r"[af]$", "", arch)
    table = _CUDA_TABLE.get(base)
    found = {field: int(detected[name]) for name, field in _DETECTED.items()
             if detected and detected.get(name) is not None}
    if table is None and len(found) < 4:
        return None
    merged = {**(table or _CUDA_TABLE["sm_90"]), **found}
    return CudaLimits(arch=base, source="device" if found else "table", **merged)


def shared_optin_bytes(device: Device) -> int | None:
    """The dynamic shared memory a block may have on a CUDA device or target: what the device reported, else its
    architecture's table entry; None when neither is known."""
    reported = device.prop("shared_per_block_optin_bytes")
    if reported is not None:
        return int(reported)
    limits = cuda_limits(device.arch)
    return limits.shared_per_block_optin_bytes if limits else None


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def occupancy(registers: int, block_threads: int, shared_bytes: int, limits: CudaLimits) -> Occupancy:
    """Resident blocks per SM for a kernel, by the rules of CUDA's occupancy calculator (cuda_occupancy.h):

    - warps: a block takes ceil(threads / 32) warps; an SM holds max_threads_per_sm / 32 warps and at most
      max_blocks_per_sm blocks.
    - registers: a warp is given registers_per_thread * 32 rounded up to 256; the register file is split into 4
      partitions (one per scheduler) and a warp lives in one, so an SM holds 4 * floor(regs_per_sm / 4 /
      regs_per_warp) warps. A block cannot launch when regs_per_warp * (its warps rounded up to 4) exceeds the
      per-block limit (64 Ki registers).
    - shared memory: a block takes static + dynamic + the system's reservation (1 KiB from sm_80 on), rounded up
      to 128 bytes; an SM holds floor(shared_per_sm / that) blocks, with shared_per_sm the largest carveout.
    Blocks per SM is the smallest of the four; occupancy is the resident warps over the SM's maximum.
    """
    warps = math.ceil(block_threads / limits.warp_size)
    max_warps = limits.max_threads_per_sm // limits.warp_size
    by: dict[str, int] = {"warps": max_warps // warps if warps else 0, "blocks": limits.max_blocks_per_sm}
    problems: list[str] = []
    if block_threads > limits.max_threads_per_block:
        problems.append(f"{block_threads} threads exceed the {limits.max_threads_per_block}-thread block limit")
        by["warps"] = 0
    regs_per_warp = _round_up(registers * limits.warp_size, limits.register_unit) if registers > 0 else 0
    if regs_per_warp:
        per_partition = limits.registers_per_sm // limits.register_partitions // regs_per_warp
        warps_by_regs = per_partition * limits.register_partitions
        by["registers"] = warps_by_regs // warps if warps else 0
        block_regs = regs_per_warp * _round_up(warps, limits.register_partitions)
        if block_regs > limits.max_registers_per_block:
            problems.append(f"{registers} registers x {block_threads} threads need {block_regs} registers, over the "
                            f"{limits.max_registers_per_block} a block may have")
            by["registers"] = 0
    shared = shared_bytes + limits.reserved_shared_per_block_bytes
    shared_alloc = _round_up(shared, limits.shared_unit)
    if shared_bytes > limits.shared_per_block_optin_bytes:
        problems.append(f"{shared_bytes} B of shared memory exceed the per-block limit of "
                        f"{limits.shared_per_block_optin_bytes} B")
        by["shared"] = 0
    elif shared_alloc:
        by["shared"] = limits.shared_per_sm_bytes // shared_alloc
    blocks = min(by.values())
    limited = sorted(k for k, v in by.items() if v == blocks)
    active = blocks * warps
    return Occupancy(
        block_threads=block_threads, warps_per_block=warps, shared_per_block_bytes=shared_alloc,
        blocks_per_sm=blocks, warps_per_sm=active, max_warps_per_sm=max_warps,
        occupancy=round(active / max_warps, 4) if max_warps else None, limited_by=limited, blocks_by_limit=by,
        device_limits=limits.model_dump(include={"arch", "max_threads_per_sm", "max_blocks_per_sm", "registers_per_sm",
                                                 "shared_per_sm_bytes", "reserved_shared_per_block_bytes",
                                                 "source"}),
        note="; ".join(problems) or None)
