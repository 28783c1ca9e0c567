"""TMA tensor maps a CUDA kernel asks for with `// peak: tensor_map NAME box=(...) swizzle=S` lines.

A kernel cannot run host code, and a Hopper TMA copy needs a `CUtensorMap` encoded on the host. So the server
encodes one per line at every launch, from what it alone can vouch for: the problem buffer's own device address,
element type and declared shape (packed row-major), never the kernel's word, so a map cannot reach past its buffer;
out-of-bounds boxes read zeros and out-of-bounds stores are dropped by the hardware. The kernel's part is the box
(the tile one copy moves) and the swizzle. Maps follow the scalars as `const __grid_constant__` 128-byte parameters.

TMA needs every row pitch (the stride of each outer dimension) to be a multiple of 16 bytes and a box's inner extent to
fit the swizzle span. Where the buffer's shape at some sizes breaks the first (bf16 with K = 77, say), the map is
128 zero bytes and `unencodable` says why: a kernel must check such sizes and take another path, or it faults on the
zero map, and the verdict quotes that reason.

This module is the domain half (what to encode, and whether it can be); backends/cuda.py encodes and launches.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from peak_mcp.core.dtypes import itemsize
from peak_mcp.core.errors import AnnotationError
from peak_mcp.core.launch import LaunchSpec
from peak_mcp.problems.base import BufferArg, Problem

MAP_BYTES = 128
MAX_BOX = 256  # elements per box dimension (the hardware's limit)
PITCH_ALIGN = 16  # bytes: global strides of a tensor map


@dataclass(frozen=True)
class TensorMapRequest:
    """One descriptor to encode at a launch: buffer `index` of the ABI's buffers, its storage dtype, shape and the
    box (both outermost first), swizzle span in bytes; `unencodable` says why TMA cannot describe this buffer at these
    sizes (then the kernel gets zeros)."""

    buffer: str
    index: int
    dtype: str
    shape: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: int
    unencodable: str | None = None

    @property
    def strides(self) -> tuple[int, ...]:
        """Byte strides of the outer dimensions, innermost-but-one first (the driver's order)."""
        size, out = itemsize(self.dtype), []
        for extent in reversed(self.shape[1:]):
            size *= extent
            out.append(size)
        return tuple(out)


def requests(spec: LaunchSpec, problem: Problem, dtype: str, sizes: Mapping[str, int],
             params: Mapping[str, int] | None = None) -> list[TensorMapRequest]:
    """The tensor maps a spec asks for at these sizes. Raises AnnotationError for a map the kernel got wrong at any
    size (unknown buffer, box rank or extent); a shape TMA cannot describe is a request with `unencodable` set."""
    if not spec.tensor_maps:
        return []
    buffers = [a for a in problem.arguments(dtype) if isinstance(a, BufferArg)]
    out = []
    for line, box in zip(spec.tensor_maps, spec.boxes(sizes, params), strict=True):
        index = next((i for i, b in enumerate(buffers) if b.name == line.buffer), None)
        if index is None:
            raise AnnotationError(f"line {line.line}: tensor_map {line.buffer}: the problem has no buffer of that "
                                  f"name (buffers: {', '.join(b.name for b in buffers)})", None)
        arg = buffers[index]
        shape = tuple(int(d) for d in arg.shape(sizes))
        if len(box) != len(shape):
            raise AnnotationError(f"line {line.line}: tensor_map {arg.name} box has {len(box)} extents; the buffer "
                                  f"has {len(shape)} dimensions {shape}",
                                  "give one extent per dimension, outermost first.")
        if any(not 1 <= b <= MAX_BOX for b in box):
            raise AnnotationError(f"line {line.line}: tensor_map {arg.name} box={box}: every extent must be 1 to "
                                  f"{MAX_BOX}", None)
        inner_bytes = box[-1] * itemsize(arg.dtype)
        if line.swizzle and inner_bytes > line.swizzle:
            raise AnnotationError(f"line {line.line}: tensor_map {arg.name}: the box's inner extent is {inner_bytes} "
                                  f"bytes, over the {line.swizzle}-byte swizzle span",
                                  f"make the last box extent <= {line.swizzle // itemsize(arg.dtype)} elements.")
        if inner_bytes % 16:
            raise AnnotationError(f"line {line.line}: tensor_map {arg.name}: the box's inner extent is {inner_bytes} "
                                  "bytes; TMA moves whole 16-byte chunks", "make it a multiple of 16 bytes.")
        request = TensorMapRequest(arg.name, index, arg.dtype, shape, box, line.swizzle)
        out.append(_with_reason(request))
    return out


def _with_reason(request: TensorMapRequest) -> TensorMapRequest:
    pitch = next((s for s in request.strides if s % PITCH_ALIGN), None)
    if pitch is not None:
        why = (f"{request.buffer}'s row pitch at shape {request.shape} is {pitch} bytes, not a multiple of "
               f"{PITCH_ALIGN}")
    elif math.prod(request.shape) == 0:
        why = f"{request.buffer} is empty"
    else:
        return request
    return dataclasses.replace(request, unencodable=why)


def launch_geometry(spec: LaunchSpec, problem: Problem, dtype: str, sizes: Mapping[str, int],
                    params: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Grid, block, shared (and cluster) at these sizes, plus the tensor maps the kernel asks for."""
    geometry: dict[str, Any] = spec.evaluate(sizes, params)
    maps = requests(spec, problem, dtype, sizes, params)
    if maps:
        geometry["tensor_maps"] = maps
    return geometry


def unencodable_note(geometry: Mapping[str, Any]) -> str | None:
    """For a verdict: which maps this launch got as zeros, and why."""
    reasons = [m.unencodable for m in geometry.get("tensor_maps", ()) if m.unencodable]
    if not reasons:
        return None
    return ("at these sizes TMA cannot describe " + "; ".join(reasons) + ", so the kernel was passed a tensor map of "
            "zeros: test the sizes and take another path there (a row of 2-byte elements needs a multiple of 8 of "
            "them, of 4-byte ones a multiple of 4)")
