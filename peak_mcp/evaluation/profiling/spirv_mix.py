"""SPIR-V instruction mix: counts from the module's words (HLSL on Vulkan)."""

from __future__ import annotations

import struct
from collections import Counter
from typing import Any

from peak_mcp.backends.spirv import instructions
from peak_mcp.evaluation.profiling.report import InstructionMix, static_counts

_OP = {"ExtInstImport": 11, "ExtInst": 12, "TypeBool": 20, "TypeInt": 21, "TypeFloat": 22, "TypeVector": 23,
       "TypeMatrix": 24, "TypeArray": 28, "TypeRuntimeArray": 29, "TypeStruct": 30, "TypePointer": 32,
       "Constant": 43, "Function": 54, "FunctionParameter": 55, "Variable": 59, "Load": 61, "Store": 62,
       "CopyMemory": 63, "AccessChain": 65, "InBoundsAccessChain": 66, "PtrAccessChain": 67, "Decorate": 71,
       "CopyObject": 83, "Bitcast": 124, "Select": 169, "Phi": 245}


_POINTER_RESULTS = {_OP[n] for n in ("Variable", "AccessChain", "InBoundsAccessChain", "PtrAccessChain", "CopyObject",
                                     "FunctionParameter", "Bitcast", "Select", "Phi")}


_FLOAT_OPS = {127: "OpFNegate", 129: "OpFAdd", 131: "OpFSub", 133: "OpFMul", 136: "OpFDiv", 140: "OpFRem",
              141: "OpFMod", 142: "OpVectorTimesScalar", 143: "OpMatrixTimesScalar", 144: "OpVectorTimesMatrix",
              145: "OpMatrixTimesVector", 146: "OpMatrixTimesMatrix", 148: "OpDot"}


_INT_OPS = set(range(128, 141)) - set(_FLOAT_OPS) | set(range(194, 201))  # IAdd..SMod, shifts and bitwise


_BARRIERS = {224: "OpControlBarrier", 225: "OpMemoryBarrier"}


_COOPERATIVE = {4457: "OpCooperativeMatrixLoadKHR", 4458: "OpCooperativeMatrixStoreKHR",
                4459: "OpCooperativeMatrixMulAddKHR", 5359: "OpCooperativeMatrixLoadNV",
                5360: "OpCooperativeMatrixStoreNV", 5361: "OpCooperativeMatrixMulAddNV"}


_CONTROL_OPS = {245, 246, 247, 248, 249, 250, 251, 252, 253}  # Phi, merges, Label, Branch(Conditional), Switch, Kill


_GLSL_FMA = 50


_STORAGE = {0: "UniformConstant", 1: "Input", 2: "Uniform", 3: "Output", 4: "Workgroup", 5: "CrossWorkgroup",
            6: "Private", 7: "Function", 9: "PushConstant", 12: "StorageBuffer", 5349: "PhysicalStorageBuffer"}


_DEC_BUFFER_BLOCK = 3


_VARIABLES = {"Function", "Private", "Input", "Output", "PushConstant", "UniformConstant"}


def spirv_mix(spirv: bytes) -> InstructionMix:
    """Count a SPIR-V module's arithmetic, memory and barrier instructions (static counts, all functions).

    Loads and stores are named by the storage class of the variable they reach (a Uniform block decorated
    BufferBlock, as glslang emits for StructuredBuffer, counts as StorageBuffer) and by the bits moved."""
    types: dict[int, tuple[Any, ...]] = {}
    buffer_blocks: set[int] = set()
    constants: dict[int, int] = {}
    glsl_set: int | None = None
    pointer_root: dict[int, str] = {}  # pointer id -> storage label of the variable it derives from
    value_type: dict[int, int] = {}  # pointer id -> its pointer type id
    in_function = False
    total = 0
    groups: Counter[str] = Counter()
    ops: Counter[str] = Counter()
    memory: Counter[str] = Counter()

    def bits(tid: int, depth: int = 0) -> int:
        t = types.get(tid)
        if t is None or depth > 16:
            return 0
        if t[0] == "scalar":
            return t[1]
        if t[0] == "vector":
            return t[2] * bits(t[1], depth + 1)
        if t[0] == "array":
            return constants.get(t[2], 0) * bits(t[1], depth + 1)
        if t[0] == "struct":
            return sum(bits(m, depth + 1) for m in t[1])
        return 0

    def label(storage: int, pointee: int) -> str:
        if storage == 2 and pointee in buffer_blocks:
            return "StorageBuffer"
        return _STORAGE.get(storage, f"StorageClass{storage}")

    for op, args in instructions(spirv):
        if op == _OP["ExtInstImport"] and bytes(struct.pack(f"<{len(args) - 1}I", *args[1:])).startswith(b"GLSL"):
            glsl_set = args[0]
        elif op == _OP["TypeBool"]:
            types[args[0]] = ("scalar", 32)
        elif op in (_OP["TypeInt"], _OP["TypeFloat"]):
            types[args[0]] = ("scalar", args[1])
        elif op in (_OP["TypeVector"], _OP["TypeMatrix"]):
            types[args[0]] = ("vector", args[1], args[2])
        elif op == _OP["TypeArray"]:
            types[args[0]] = ("array", args[1], args[2])
        elif op == _OP["TypeStruct"]:
            types[args[0]] = ("struct", list(args[1:]))
        elif op == _OP["TypePointer"]:
            types[args[0]] = ("pointer", args[1], args[2])
        elif op == _OP["Constant"] and len(args) >= 3:
            constants[args[1]] = args[2]
        elif op == _OP["Decorate"] and len(args) >= 2 and args[1] == _DEC_BUFFER_BLOCK:
            buffer_blocks.add(args[0])
        elif op == _OP["Function"]:
            in_function = True
        if op in _POINTER_RESULTS and len(args) >= 2 and types.get(args[0], ("",))[0] == "pointer":
            ptr_type, result = args[0], args[1]
            value_type[result] = ptr_type
            if op == _OP["Variable"]:
                pointer_root[result] = label(types[ptr_type][1], types[ptr_type][2])
            elif len(args) >= 3 and args[2] in pointer_root:
                pointer_root[result] = pointer_root[args[2]]
            else:
                pointer_root[result] = _STORAGE.get(types[ptr_type][1], "?")
        if not in_function:
            continue
        total += 1
        if op in (_OP["Load"], _OP["Store"]):
            pointer = args[2] if op == _OP["Load"] else args[0]
            root = pointer_root.get(pointer, "?")
            if root in _VARIABLES:  # function locals, inputs, push constants: registers once the driver compiles
                groups["variable"] += 1
                continue
            groups["memory"] += 1
            if op == _OP["Load"]:
                memory[f"{root}.load.{bits(args[0])}"] += 1
            else:
                memory[f"{root}.store.{bits(types.get(value_type.get(pointer, -1), ('', 0, -1))[2])}"] += 1
        elif 227 <= op <= 242:  # OpAtomic*
            groups["memory"] += 1
            memory[f"{pointer_root.get(args[2], '?')}.atomic"] += 1
        elif op in _FLOAT_OPS:
            groups["float"] += 1
            ops[_FLOAT_OPS[op]] += 1
        elif op == _OP["ExtInst"] and len(args) >= 4 and args[2] == glsl_set:
            if args[3] == _GLSL_FMA:
                groups["float"] += 1
                ops["Fma"] += 1
            else:
                groups["math"] += 1
        elif op in _COOPERATIVE:
            groups["cooperative_matrix"] += 1
            ops[_COOPERATIVE[op]] += 1
        elif op in _BARRIERS:
            groups["barrier"] += 1
            ops[_BARRIERS[op]] += 1
        elif 333 <= op <= 366 or 4421 <= op <= 4432:
            groups["subgroup"] += 1
        elif op in _INT_OPS:
            groups["integer"] += 1
        elif op in _CONTROL_OPS:
            groups["control"] += 1
        elif op in (_OP["AccessChain"], _OP["InBoundsAccessChain"], _OP["PtrAccessChain"]):
            groups["addressing"] += 1
        else:
            groups["other"] += 1
    return InstructionMix(source="SPIR-V", counts=static_counts("SPIR-V module"), total=total,
                          groups=dict(groups.most_common()), ops=dict(ops.most_common()),
                          memory=dict(sorted(memory.items())))
