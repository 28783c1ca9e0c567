"""SPIR-V reflection: what a compiled compute shader declares, read straight off the binary's words.

A few dozen lines of word parsing instead of a reflection library: entry points, the thread-group size,
capabilities, descriptor bindings, and the push-constant and groupshared sizes. Knows nothing of Vulkan devices
or of the kernel ABI; the HLSL executor decides what to refuse.
"""

from __future__ import annotations

import collections
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

MAGIC = 0x07230203

_OP_NAME, _OP_ENTRY_POINT, _OP_EXECUTION_MODE, _OP_CAPABILITY = 5, 15, 16, 17
_OP_TYPE_BOOL, _OP_TYPE_INT, _OP_TYPE_FLOAT, _OP_TYPE_VECTOR, _OP_TYPE_MATRIX = 20, 21, 22, 23, 24
_OP_TYPE_ARRAY, _OP_TYPE_RUNTIME_ARRAY, _OP_TYPE_STRUCT, _OP_TYPE_POINTER = 28, 29, 30, 32
_OP_CONSTANT, _OP_SPEC_CONSTANT, _OP_VARIABLE, _OP_DECORATE, _OP_MEMBER_DECORATE = 43, 50, 59, 71, 72
_OP_EXECUTION_MODE_ID = 331
_MODE_LOCAL_SIZE, _MODE_LOCAL_SIZE_ID = 17, 38
_DEC_BUFFER_BLOCK, _DEC_ARRAY_STRIDE, _DEC_BINDING, _DEC_SET, _DEC_OFFSET = 3, 6, 33, 34, 35
_SC_UNIFORM_CONSTANT, _SC_UNIFORM, _SC_WORKGROUP, _SC_PUSH_CONSTANT, _SC_STORAGE_BUFFER = 0, 2, 4, 9, 12
_EXEC_MODEL_GLCOMPUTE = 5

# SPIR-V capability -> (its name, the Vulkan feature a device must enable for it)
CAPABILITY_FEATURES = {
    9: ("Float16", "shaderFloat16"), 10: ("Float64", "shaderFloat64"), 11: ("Int64", "shaderInt64"),
    12: ("Int64Atomics", "shaderBufferInt64Atomics"), 22: ("Int16", "shaderInt16"), 39: ("Int8", "shaderInt8"),
    4433: ("StorageBuffer16BitAccess", "storageBuffer16BitAccess"),
    4434: ("UniformAndStorageBuffer16BitAccess", "uniformAndStorageBuffer16BitAccess"),
    4435: ("StoragePushConstant16", "storagePushConstant16"),
    4448: ("StorageBuffer8BitAccess", "storageBuffer8BitAccess"),
    4449: ("UniformAndStorageBuffer8BitAccess", "uniformAndStorageBuffer8BitAccess"),
    4450: ("StoragePushConstant8", "storagePushConstant8"),
    5345: ("VulkanMemoryModel", "vulkanMemoryModel"),
    5347: ("PhysicalStorageBufferAddresses", "bufferDeviceAddress"),
}

BindingKind = Literal["storage_buffer", "uniform_buffer", "texture_or_sampler"]


@dataclass(frozen=True)
class Binding:
    """One descriptor the shader declares."""

    set: int
    binding: int  # -1 when the variable has no Binding decoration
    kind: BindingKind
    name: str
    count: int  # 1 for a single resource, N for an array of N, 0 for a runtime-sized array


@dataclass(frozen=True)
class SpirvInfo:
    entry_points: list[str]  # GLCompute entry points only
    local_size: tuple[int, int, int] | None  # of the entry asked for; None when it has none (or is absent)
    capabilities: list[int]
    bindings: list[Binding]  # sorted by (set, binding)
    push_constant_bytes: int  # rounded up to whole 32-bit words
    groupshared_bytes: int

    def capability_names(self) -> list[str]:
        return [CAPABILITY_FEATURES[c][0] for c in self.capabilities if c in CAPABILITY_FEATURES]


def _string(words: list[int]) -> str:
    """The SPIR-V literal string starting at words[0] (nul-terminated, packed four bytes a word)."""
    raw = struct.pack(f"<{len(words)}I", *words)
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def instructions(spirv: bytes) -> Iterator[tuple[int, list[int]]]:
    """(opcode, operand words) of each instruction after the header. ValueError for bytes that are not a
    well-formed SPIR-V word stream."""
    if len(spirv) < 20 or len(spirv) % 4:
        raise ValueError("not a SPIR-V module")
    words = list(struct.unpack(f"<{len(spirv) // 4}I", spirv))
    if words[0] != MAGIC:
        raise ValueError("not a SPIR-V module (bad magic number)")
    pos = 5  # after the header: magic, version, generator, bound, schema
    while pos < len(words):
        count, op = words[pos] >> 16, words[pos] & 0xFFFF
        if count == 0:
            raise ValueError("malformed SPIR-V (zero-length instruction)")
        yield op, words[pos + 1: pos + count]
        pos += count


def reflect(spirv: bytes, entry: str) -> SpirvInfo:
    """Read what we need from a SPIR-V module: entry points, LocalSize, capabilities, descriptors, sizes.

    Raises ValueError for bytes that are not a well-formed SPIR-V word stream."""
    names: dict[int, str] = {}
    entries: dict[int, str] = {}
    modes: dict[int, tuple[int, list[int]]] = {}
    capabilities: list[int] = []
    types: dict[int, tuple[Any, ...]] = {}
    constants: dict[int, int] = {}
    decorations: dict[int, dict[int, list[int]]] = collections.defaultdict(dict)
    member_offsets: dict[tuple[int, int], int] = {}
    variables: list[tuple[int, int, int]] = []
    for op, ops in instructions(spirv):
        if op == _OP_NAME:
            names[ops[0]] = _string(ops[1:])
        elif op == _OP_ENTRY_POINT and ops[0] == _EXEC_MODEL_GLCOMPUTE:
            entries[ops[1]] = _string(ops[2:])
        elif op in (_OP_EXECUTION_MODE, _OP_EXECUTION_MODE_ID) and ops[1] in (_MODE_LOCAL_SIZE, _MODE_LOCAL_SIZE_ID):
            modes[ops[0]] = (ops[1], ops[2:5])
        elif op == _OP_CAPABILITY:
            capabilities.append(ops[0])
        elif op == _OP_TYPE_BOOL:
            types[ops[0]] = ("scalar", 4)
        elif op in (_OP_TYPE_INT, _OP_TYPE_FLOAT):
            types[ops[0]] = ("scalar", ops[1] // 8)
        elif op in (_OP_TYPE_VECTOR, _OP_TYPE_MATRIX):
            types[ops[0]] = ("vector", ops[1], ops[2])
        elif op == _OP_TYPE_ARRAY:
            types[ops[0]] = ("array", ops[1], ops[2])
        elif op == _OP_TYPE_RUNTIME_ARRAY:
            types[ops[0]] = ("runtime_array", ops[1])
        elif op == _OP_TYPE_STRUCT:
            types[ops[0]] = ("struct", list(ops[1:]))
        elif op == _OP_TYPE_POINTER:
            types[ops[0]] = ("pointer", ops[1], ops[2])
        elif op in (_OP_CONSTANT, _OP_SPEC_CONSTANT) and len(ops) >= 3:
            constants[ops[1]] = ops[2]
        elif op == _OP_VARIABLE:
            variables.append((ops[0], ops[1], ops[2]))
        elif op == _OP_DECORATE:
            decorations[ops[0]][ops[1]] = list(ops[2:])
        elif op == _OP_MEMBER_DECORATE and ops[2] == _DEC_OFFSET:
            member_offsets[(ops[0], ops[1])] = ops[3]

    def size_of(tid: int, depth: int = 0) -> int:
        t = types.get(tid)
        if t is None or depth > 32:
            return 0
        if t[0] == "scalar":
            return t[1]
        if t[0] == "vector":
            return t[2] * size_of(t[1], depth + 1)
        if t[0] == "array":
            stride = decorations[tid].get(_DEC_ARRAY_STRIDE, [size_of(t[1], depth + 1)])[0]
            return stride * constants.get(t[2], 0)
        if t[0] == "struct":
            sizes = [size_of(m, depth + 1) for m in t[1]]
            if all((tid, i) in member_offsets for i in range(len(sizes))):
                return max((member_offsets[(tid, i)] + s for i, s in enumerate(sizes)), default=0)
            return sum(sizes)
        return 0

    entry_id = next((i for i, n in entries.items() if n == entry), None)
    local_size = None
    if entry_id is not None and entry_id in modes:
        mode, values = modes[entry_id]
        local_size = tuple(values if mode == _MODE_LOCAL_SIZE else (constants.get(v, 0) for v in values))
    bindings: list[Binding] = []
    push_bytes, shared_bytes = 0, 0
    for type_id, var_id, storage in variables:
        pointee = types.get(type_id, ("?", 0, 0))[2] if types.get(type_id, ("",))[0] == "pointer" else None
        if storage == _SC_WORKGROUP and pointee is not None:
            shared_bytes += size_of(pointee)
        elif storage == _SC_PUSH_CONSTANT and pointee is not None:
            push_bytes = max(push_bytes, size_of(pointee))
        elif storage in (_SC_UNIFORM_CONSTANT, _SC_UNIFORM, _SC_STORAGE_BUFFER):
            block, count = pointee, 1
            if block is not None and types.get(block, ("",))[0] in ("array", "runtime_array"):
                count = constants.get(types[block][2], 0) if types[block][0] == "array" else 0
                block = types[block][1]
            kind: BindingKind
            if storage == _SC_STORAGE_BUFFER or (storage == _SC_UNIFORM and _DEC_BUFFER_BLOCK in decorations[block]):
                kind = "storage_buffer"
            elif storage == _SC_UNIFORM:
                kind = "uniform_buffer"
            else:
                kind = "texture_or_sampler"
            dec = decorations[var_id]
            bindings.append(Binding(set=dec.get(_DEC_SET, [0])[0], binding=dec.get(_DEC_BINDING, [-1])[0], kind=kind,
                                    name=names.get(var_id) or names.get(block or -1, ""), count=count))
    bindings.sort(key=lambda b: (b.set, b.binding))
    return SpirvInfo(list(entries.values()), local_size, capabilities, bindings, (push_bytes + 3) // 4 * 4,
                     shared_bytes)
