"""HLSL backend: compile to SPIR-V with dxc (when on PATH) or glslangValidator, run and time through Vulkan.

ABI (problem.arguments order): buffers are storage buffers at [[vk::binding(0..n-1)]] in set 0; scalar arguments
are consecutive 32-bit uints in one push-constant block. The thread-group size is the shader's [numthreads]; the
annotation gives the dispatch size: `// peak: entry=main groups=(cdiv(N, 16), cdiv(M, 16), 1)`.

The compiled SPIR-V is reflected here (a few dozen lines of word parsing) for what the agent should see
(numthreads, groupshared bytes, bindings, capabilities) and for what must be refused before the driver sees it:
limits the device cannot launch and features it lacks (16-bit floats above all).
"""

from __future__ import annotations

import collections
import hashlib
import os
import re
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from peak_mcp.backends.base import Compiled, CompileFailed, DeviceFacts, Executor, KernelFault, Regions
from peak_mcp.backends.includes import check_source, refusal_log, sanitize_log
from peak_mcp.errors import InvalidInput
from peak_mcp.launch import LaunchSpec

SOURCE_NAME = "kernel.hlsl"
FENCE_TIMEOUT_ENV = "PEAK_MCP_VK_FENCE_TIMEOUT_S"
COMPILER_ENV = "PEAK_MCP_HLSL_COMPILER"  # "dxc" or "glslangValidator" to force one
_CACHE_SIZE = 64

# --- compilers -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Compiler:
    name: str  # "dxc" | "glslangValidator"
    path: str

    def command(self, entry: str, source: str, output: str) -> list[str]:
        # 16-bit types always on: `half` then means a real 16-bit float (HLSL 2018+ semantics), which f16
        # buffers need; f32 kernels are unaffected.
        if self.name == "dxc":
            return [self.path, "-spirv", "-T", "cs_6_2", "-E", entry, "-HV", "2021", "-enable-16bit-types",
                    "-fspv-target-env=vulkan1.2", "-Fo", output, source]
        return [self.path, "-D", "-V", "-S", "comp", "-e", entry, "--target-env", "vulkan1.2",
                "--hlsl-enable-16bit-types", "-o", output, source]

    def version(self) -> str:
        flag = "--version"
        try:
            done = subprocess.run([self.path, flag], capture_output=True, text=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"unknown ({type(exc).__name__})"
        lines = (done.stdout or done.stderr).strip().splitlines()
        return lines[0].strip() if lines else "unknown"


def find_compiler(prefer: str | None = None) -> Compiler | None:
    """dxc when on PATH (the reference HLSL compiler), else glslangValidator; `prefer` or $PEAK_MCP_HLSL_COMPILER
    forces one."""
    prefer = prefer or os.environ.get(COMPILER_ENV)
    order = [prefer] if prefer else ["dxc", "glslangValidator"]
    for name in order:
        path = shutil.which(name)
        if path:
            return Compiler("dxc" if Path(name).name.startswith("dxc") else "glslangValidator", path)
    return None


def _clean_log(text: str, workdir: str) -> str:
    """Compiler output with temp paths removed, so positions read `kernel.hlsl:LINE`."""
    text = text.replace(workdir + os.sep, "").replace(workdir, "")
    lines = [line.rstrip() for line in text.replace("\r", "").splitlines()]
    lines = [line for line in lines if line.strip() and line.strip() != SOURCE_NAME]  # glslang echoes the name
    return sanitize_log("\n".join(lines), SOURCE_NAME)


# --- SPIR-V reflection -----------------------------------------------------------------------------------------

_OP_NAME, _OP_ENTRY_POINT, _OP_EXECUTION_MODE, _OP_CAPABILITY = 5, 15, 16, 17
_OP_TYPE_BOOL, _OP_TYPE_INT, _OP_TYPE_FLOAT, _OP_TYPE_VECTOR, _OP_TYPE_MATRIX = 20, 21, 22, 23, 24
_OP_TYPE_ARRAY, _OP_TYPE_RUNTIME_ARRAY, _OP_TYPE_STRUCT, _OP_TYPE_POINTER = 28, 29, 30, 32
_OP_CONSTANT, _OP_SPEC_CONSTANT, _OP_VARIABLE, _OP_DECORATE, _OP_MEMBER_DECORATE = 43, 50, 59, 71, 72
_OP_EXECUTION_MODE_ID = 331
_MODE_LOCAL_SIZE, _MODE_LOCAL_SIZE_ID = 17, 38
_DEC_BLOCK, _DEC_BUFFER_BLOCK, _DEC_ARRAY_STRIDE, _DEC_BINDING, _DEC_SET, _DEC_OFFSET = 2, 3, 6, 33, 34, 35
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


@dataclass
class SpirvInfo:
    entry_points: list[str]
    local_size: tuple[int, int, int] | None
    capabilities: list[int]
    bindings: list[dict[str, Any]]  # {'set', 'binding', 'kind', 'name', 'count'}
    push_constant_bytes: int
    groupshared_bytes: int
    notes: list[str] = field(default_factory=list)

    def capability_names(self) -> list[str]:
        return [CAPABILITY_FEATURES[c][0] for c in self.capabilities if c in CAPABILITY_FEATURES]


def _string(words: list[int]) -> tuple[str, int]:
    """A SPIR-V literal string starting at words[0]; returns it and how many words it used."""
    raw = struct.pack(f"<{len(words)}I", *words)
    text = raw.split(b"\0", 1)[0]
    return text.decode(errors="replace"), len(text) // 4 + 1


def reflect(spirv: bytes, entry: str) -> SpirvInfo:
    """Read what we need from a SPIR-V module: entry points, LocalSize, capabilities, descriptors, sizes."""
    if len(spirv) < 20 or len(spirv) % 4:
        raise ValueError("not a SPIR-V module")
    words = list(struct.unpack(f"<{len(spirv) // 4}I", spirv))
    if words[0] != 0x07230203:
        raise ValueError("not a SPIR-V module (bad magic number)")
    names: dict[int, str] = {}
    entries: dict[int, str] = {}
    modes: dict[int, tuple[int, list[int]]] = {}
    capabilities: list[int] = []
    types: dict[int, tuple[Any, ...]] = {}
    constants: dict[int, int] = {}
    decorations: dict[int, dict[int, list[int]]] = collections.defaultdict(dict)
    member_offsets: dict[tuple[int, int], int] = {}
    variables: list[tuple[int, int, int]] = []
    pos = 5
    while pos < len(words):
        count, op = words[pos] >> 16, words[pos] & 0xFFFF
        if count == 0:
            raise ValueError("malformed SPIR-V (zero-length instruction)")
        ops = words[pos + 1: pos + count]
        pos += count
        if op == _OP_NAME:
            names[ops[0]] = _string(ops[1:])[0]
        elif op == _OP_ENTRY_POINT and ops[0] == _EXEC_MODEL_GLCOMPUTE:
            entries[ops[1]] = _string(ops[2:])[0]
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
    bindings, push_bytes, shared_bytes = [], 0, 0
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
            if storage == _SC_STORAGE_BUFFER or (storage == _SC_UNIFORM and _DEC_BUFFER_BLOCK in decorations[block]):
                kind = "storage_buffer"
            elif storage == _SC_UNIFORM:
                kind = "uniform_buffer"
            else:
                kind = "texture_or_sampler"
            dec = decorations[var_id]
            bindings.append({"set": dec.get(_DEC_SET, [0])[0], "binding": dec.get(_DEC_BINDING, [-1])[0],
                             "kind": kind, "name": names.get(var_id) or names.get(block or -1, ""), "count": count})
    bindings.sort(key=lambda b: (b["set"], b["binding"]))
    return SpirvInfo(list(entries.values()), local_size, capabilities, bindings, (push_bytes + 3) // 4 * 4,
                     shared_bytes)


def _abi_problems(info: SpirvInfo) -> list[str]:
    """Descriptors the ABI cannot feed: only single storage buffers in set 0 are bound."""
    problems = []
    for b in info.bindings:
        where = f"`{b['name']}` (set {b['set']}, binding {b['binding']})"
        if b["kind"] != "storage_buffer":
            extra = (" — a cbuffer, or a global variable without `static` (HLSL puts those in a $Globals constant "
                     "buffer)" if b["kind"] == "uniform_buffer" else "")
            problems.append(f"{where} is a {b['kind'].replace('_', ' ')}{extra}; the ABI binds only storage buffers "
                            "(StructuredBuffer / ByteAddressBuffer and their RW variants)")
        elif b["set"] != 0:
            problems.append(f"{where}: only descriptor set 0 is bound; use [[vk::binding(N)]] or [[vk::binding(N, 0)]]")
        elif b["count"] != 1:
            problems.append(f"{where} is an array of buffers; declare one buffer per binding")
        elif b["binding"] < 0:
            problems.append(f"{where} has no binding number; add [[vk::binding(N)]]")
    return problems


# --- the executor ----------------------------------------------------------------------------------------------


@dataclass
class HlslKernel:
    """Compiled.handle for HLSL: the SPIR-V plus what reflection found; the pipeline lives in the executor."""

    spirv: bytes
    entry: str
    info: SpirvInfo
    key: str = ""


class HlslExecutor(Executor):
    backend = "hlsl"

    def __init__(self, index: int | None, *, fence_timeout_s: float | None = None, compiler: str | None = None,
                 compile_timeout_s: float = 60.0, flush_bytes: int | None = None,
                 l2_bytes: int | None = None) -> None:
        self.compiler = find_compiler(compiler)
        self.compile_timeout_s = compile_timeout_s
        self._spirv_cache: collections.OrderedDict[str, tuple[bytes, str]] = collections.OrderedDict()
        self._pipelines: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self.device: Any = None
        compiler_facts = {"compiler": self.compiler.name if self.compiler else None}
        if index is None:
            self.facts = DeviceFacts("hlsl", -1, "compile-only (no Vulkan device)", compiler_facts)
            return
        from peak_mcp.backends.vulkan_runtime import VulkanDevice

        timeout = fence_timeout_s if fence_timeout_s is not None else float(os.environ.get(FENCE_TIMEOUT_ENV, 30))
        self.device = VulkanDevice(index, fence_timeout_s=timeout, flush_bytes=flush_bytes, l2_bytes=l2_bytes,
                                   l2_lookup=_profile_l2_bytes)
        phys = self.device.physical
        timing = ("timestamp queries" if self.device.timestamps else
                  "host wall-clock around submit+wait (the queue has no timestamp support; includes submit "
                  "overhead)")
        self.facts = DeviceFacts("hlsl", index, phys.name, {
            **phys.properties, **compiler_facts, "timing": timing, "cache_flush_bytes": self.device.flush_bytes,
            "fence_timeout_s": timeout})

    # --- compile ---------------------------------------------------------------------------------------------
    def compile(self, source: str, spec: LaunchSpec) -> Compiled:
        if self.compiler is None:
            raise CompileFailed("no HLSL compiler: install glslang-tools (glslangValidator) or put dxc on PATH")
        refused = check_source(source, None)  # no includes at all; a self-include would also hang glslang
        if refused:
            raise CompileFailed(refusal_log(refused, SOURCE_NAME))
        spirv, log = self._to_spirv(source, spec.entry)
        try:
            info = reflect(spirv, spec.entry)
        except ValueError as exc:
            raise CompileFailed(f"the compiler produced unreadable SPIR-V: {exc}") from None
        # glslang only warns when the entry is missing, and emits an empty shader of that name.
        if spec.entry not in info.entry_points or "Entry point not found" in log:
            raise CompileFailed(
                f"{SOURCE_NAME}:{spec.line}: entry '{spec.entry}' named on the peak: line was not found as a compute "
                f"entry point (found {info.entry_points or 'none'}); name the [numthreads(...)] function exactly so"
                + (f"\n{log}" if log else ""))
        problems = _abi_problems(info)
        if info.local_size is not None and 0 in info.local_size:
            problems.append(f"[numthreads{tuple(info.local_size)}] has a zero dimension: a group of no threads "
                            "runs nothing; every dimension must be at least 1")
        if info.local_size is None:
            problems.append(f"entry '{spec.entry}' has no thread-group size; add [numthreads(X, Y, Z)]")
        if self.device is not None:
            problems += self._device_problems(info)
        if problems:
            raise CompileFailed("\n".join(f"{SOURCE_NAME}: error: {p}" for p in problems))
        kernel = HlslKernel(spirv, spec.entry, info, hashlib.sha256(spirv + spec.entry.encode()).hexdigest())
        if self.device is not None:
            self._pipeline(kernel)  # driver-side compile now, so its errors read as compile errors
        x, y, z = info.local_size or (0, 0, 0)
        resources: dict[str, Any] = {
            "numthreads": [x, y, z], "threads_per_group": x * y * z, "groupshared_bytes": info.groupshared_bytes,
            "push_constant_bytes": info.push_constant_bytes, "spirv_bytes": len(spirv),
            "compiler": self.compiler.name, "bindings": [{k: b[k] for k in ("binding", "name")} for b in info.bindings],
            "capabilities": info.capability_names(),
        }
        return Compiled(handle=kernel, spec=spec, resources=resources, log=log)

    def _to_spirv(self, source: str, entry: str) -> tuple[bytes, str]:
        assert self.compiler is not None
        key = hashlib.sha256(f"{self.compiler.path}\0{entry}\0{source}".encode()).hexdigest()
        if key in self._spirv_cache:
            self._spirv_cache.move_to_end(key)
            return self._spirv_cache[key]
        with tempfile.TemporaryDirectory(prefix="peak-hlsl-") as workdir:
            Path(workdir, SOURCE_NAME).write_text(source)
            command = self.compiler.command(entry, SOURCE_NAME, "kernel.spv")
            try:
                done = subprocess.run(command, cwd=workdir, capture_output=True, text=True, errors="replace",
                                      timeout=self.compile_timeout_s, check=False)
            except subprocess.TimeoutExpired:
                raise CompileFailed(
                    f"the HLSL compiler ({self.compiler.name}) did not finish within {self.compile_timeout_s:g} s and "
                    "was stopped; the compiler timed out, the kernel never ran. Simplify the source (deep macro "
                    "recursion or huge unrolled loops)") from None
            log = _clean_log(done.stdout + done.stderr, workdir)
            output = Path(workdir, "kernel.spv")
            if done.returncode != 0 or not output.exists():
                raise CompileFailed(log or f"{self.compiler.name} failed with exit status {done.returncode}")
            spirv = output.read_bytes()
        self._spirv_cache[key] = (spirv, log)
        if len(self._spirv_cache) > _CACHE_SIZE:
            self._spirv_cache.popitem(last=False)
        return spirv, log

    def _device_problems(self, info: SpirvInfo) -> list[str]:
        """What this device cannot run, caught before the driver sees it (invalid pipelines are undefined
        behaviour, not errors)."""
        props, name = self.facts.properties, self.facts.name
        problems = []
        features = self.device.physical.features
        for cap in info.capabilities:
            if cap in CAPABILITY_FEATURES:
                cap_name, feature = CAPABILITY_FEATURES[cap]
                if not features.get(feature, False):
                    hint = (" (no 16-bit float arithmetic here: use f32 on this device)" if feature == "shaderFloat16"
                            else " (no 16-bit buffer access here: f16 inputs cannot run, use f32 on this device)"
                            if "16Bit" in feature else "")
                    problems.append(f"the kernel needs the Vulkan feature {feature} (SPIR-V capability "
                                    f"{cap_name}), which {name} lacks{hint}")
        why = self._threads_problem(info.local_size)
        if why:
            problems.append(why)
        if info.groupshared_bytes > props["max_shared_memory"]:
            problems.append(f"groupshared memory is {info.groupshared_bytes} bytes, over the device limit of "
                            f"{props['max_shared_memory']} bytes (maxComputeSharedMemorySize) on {name}")
        if info.push_constant_bytes > props["max_push_constants_size"]:
            problems.append(f"the push-constant block is {info.push_constant_bytes} bytes, over the device limit of "
                            f"{props['max_push_constants_size']}")
        return problems

    def _threads_problem(self, local_size: tuple[int, int, int] | None) -> str | None:
        if local_size is None or self.device is None:
            return None
        props = self.facts.properties
        limit, total = props["max_compute_workgroup_invocations"], local_size[0] * local_size[1] * local_size[2]
        for axis, (n, most) in enumerate(zip(local_size, props["max_compute_workgroup_size"], strict=True)):
            if n > most:
                return (f"numthreads {'xyz'[axis]}={n} exceeds the device limit {most} "
                        f"(maxComputeWorkGroupSize={props['max_compute_workgroup_size']}) on {self.facts.name}")
        if total > limit:
            return (f"numthreads{tuple(local_size)} is {total} threads per group, over the device limit of {limit} "
                    f"(maxComputeWorkGroupInvocations) on {self.facts.name}")
        return None

    def _pipeline(self, kernel: HlslKernel) -> Any:
        """Pipelines are cached by SPIR-V hash (least recently used ones are destroyed past _CACHE_SIZE)."""
        from peak_mcp.backends.vulkan_runtime import PipelineError

        pipe = self._pipelines.get(kernel.key)
        if pipe is not None:
            self._pipelines.move_to_end(kernel.key)
            return pipe
        storage = [b["binding"] for b in kernel.info.bindings]
        try:
            pipe = self.device.create_pipeline(kernel.spirv, kernel.entry, max(storage, default=-1) + 1,
                                               kernel.info.push_constant_bytes)
        except PipelineError as exc:
            raise CompileFailed(str(exc)) from None
        self._pipelines[kernel.key] = pipe
        if len(self._pipelines) > _CACHE_SIZE:
            _, old = self._pipelines.popitem(last=False)
            self.device.destroy_pipeline(old)
        return pipe

    # --- memory ----------------------------------------------------------------------------------------------
    def _need_device(self) -> Any:
        if self.device is None:
            raise RuntimeError("this HLSL executor is compile-only (no Vulkan device)")
        return self.device

    def alloc(self, nbytes: int) -> Any:
        try:
            return self._guard(lambda: self._need_device().alloc(nbytes))
        except MemoryError as exc:
            raise InvalidInput(str(exc), "choose smaller sizes for this device.") from None

    def free(self, buf: Any) -> None:
        if self.device is not None:
            self._guard(lambda: self.device.free(buf))

    def write(self, buf: Any, data: np.ndarray, offset: int = 0) -> None:
        self._guard(lambda: self._need_device().write(buf, data, offset))

    def read(self, buf: Any, nbytes: int, offset: int = 0) -> np.ndarray:
        return self._guard(lambda: self._need_device().read(buf, nbytes, offset))

    def pointer(self, buf: Any, offset: int) -> Any:
        return (buf, offset)  # bound at that offset: the shader's element 0 is the body's first

    def _guard(self, action: Any) -> Any:
        """Vulkan's device-lost error, wherever it surfaces, becomes KernelFault (the worker restarts)."""
        try:
            return action()
        except KernelFault:
            raise
        except Exception as exc:
            if type(exc).__name__ == "VkErrorDeviceLost":
                raise self.device.mark_lost("VK_ERROR_DEVICE_LOST: the Vulkan device was lost (the kernel crashed "
                                            "it); the worker restarts") from None
            raise

    # --- launch ----------------------------------------------------------------------------------------------
    def check_geometry(self, kernel: Compiled, geometry: dict[str, Any]) -> str | None:
        groups = geometry.get("groups")
        if groups is None:
            return "the annotation has no groups=(x, y, z): HLSL dispatch sizes are thread groups, not threads"
        if self.device is None:
            return None
        limits = self.facts.properties["max_compute_workgroup_count"]
        for axis, (g, most) in enumerate(zip(groups, limits, strict=True)):
            if g > most:
                return (f"groups {'xyz'[axis]}={g} exceeds the device limit {most} (maxComputeWorkGroupCount="
                        f"{limits}) on {self.facts.name}; give each group more work or fold the extra groups into "
                        "another dimension")
        return self._threads_problem(kernel.handle.info.local_size)

    def _prepare(self, kernel: Compiled, buffer_sets: list[list[Any]], scalars: list[int]) -> tuple[Any, bytes]:
        device = self._need_device()
        pipe = self._pipeline(kernel.handle)
        buffers = buffer_sets[0]
        if pipe.bindings > len(buffers):
            raise InvalidInput(
                f"the shader declares bindings up to {pipe.bindings - 1}, but this problem passes {len(buffers)} "
                f"buffers (bindings 0..{len(buffers) - 1})", "follow the problem's ABI: one binding per buffer.")
        push = struct.pack(f"<{len(scalars)}I", *(int(s) & 0xFFFFFFFF for s in scalars))
        if pipe.push_bytes > len(push):
            raise InvalidInput(
                f"the shader's push-constant block is {pipe.push_bytes} bytes, but this problem passes "
                f"{len(scalars)} uint values ({len(push)} bytes)",
                "declare exactly the problem's sizes, e.g. struct Params { uint M; uint N; uint K; }.")
        largest = device.physical.properties["max_storage_buffer_range"]
        for i in range(pipe.bindings):
            buf, offset = buffers[i]
            if buf.size - offset > largest:
                raise InvalidInput(f"buffer {i} is {buf.size - offset} bytes, over the device's "
                                   f"maxStorageBufferRange of {largest} bytes on {self.facts.name}",
                                   "use smaller sizes on this device.")
        return pipe, push

    def run(self, kernel: Compiled, buffers: list[Any], scalars: list[int], geometry: dict[str, Any]) -> None:
        pipe, push = self._prepare(kernel, [buffers], scalars)
        self._guard(lambda: self.device.dispatch(pipe, buffers, push, tuple(geometry["groups"])))

    def time(self, kernel: Compiled, buffer_sets: list[list[Any]], scalars: list[int], geometry: dict[str, Any],
             reps: int, cold_cache: bool, poison: list[Regions] | None = None, after_each: Any = None) -> list[float]:
        # after_each is for device arrays; Vulkan buffers are checked through host copies after the loop.
        pipe, push = self._prepare(kernel, buffer_sets, scalars)
        fills = [[(buf, offset, nbytes) for (buf, offset), nbytes in regions] for regions in poison or []]
        return self._guard(lambda: self.device.time_dispatches(pipe, buffer_sets, push, tuple(geometry["groups"]),
                                                               max(1, int(reps)), cold_cache, fills))

    def close(self) -> None:
        if self.device is not None:
            self.device.close()


def _profile_l2_bytes(device_name: str) -> int | None:
    """L2 size from the device profiles (Vulkan does not report it); None when no profile matches."""
    try:
        from peak_mcp.devices import load_profiles, match_profile

        profile = match_profile(device_name, load_profiles())
        return int(profile.l2_mb * (1 << 20)) if profile and profile.l2_mb else None
    except Exception:
        return None


def open_executor(index: int | None, **options: Any) -> HlslExecutor:
    return HlslExecutor(index, **options)


# --- probe -----------------------------------------------------------------------------------------------------

_VK_NAME = re.compile(r"^Vk(Error\w+)$")


def probe() -> dict[str, Any]:
    """Devices and compiler, with the reason and the fix for whatever is missing. Never raises."""
    report: dict[str, Any] = {"backend": "hlsl", "devices": [], "compiler": {"available": False}, "missing": []}
    missing = report["missing"]
    try:
        compiler = find_compiler()
        if compiler:
            report["compiler"] = {"available": True, "name": compiler.name, "version": compiler.version(),
                                  "path": compiler.path}
        else:
            missing.append({"what": "HLSL compiler", "why": "neither dxc nor glslangValidator is on PATH",
                            "fix": "apt-get install glslang-tools (or put DirectXShaderCompiler's dxc on PATH)"})
    except Exception as exc:
        missing.append({"what": "HLSL compiler", "why": f"{type(exc).__name__}: {exc}",
                        "fix": "apt-get install glslang-tools"})
    try:
        from peak_mcp.backends.vulkan_runtime import create_instance, load_binding, physical_devices

        try:
            vk = load_binding()
        except (OSError, ImportError) as exc:
            missing.append({"what": "Vulkan loader", "why": f"libvulkan.so.1 cannot be loaded ({exc})",
                            "fix": "apt-get install libvulkan1 (and pip install vulkan for the Python binding)"})
            return report
        try:
            instance = create_instance(vk)
        except Exception as exc:
            code = _VK_NAME.sub(r"\1", type(exc).__name__)
            missing.append({"what": "Vulkan driver (ICD)", "why": f"vkCreateInstance failed: {code}; no Vulkan "
                            "driver is installed or none can be loaded",
                            "fix": "apt-get install mesa-vulkan-drivers (lavapipe, CPU) or the GPU vendor's driver; "
                                   "VK_DRIVER_FILES may point at its ICD json"})
            return report
        try:
            devices = physical_devices(vk, instance)
        finally:
            vk.vkDestroyInstance(instance, None)
        for dev in devices:
            report["devices"].append({"backend": "hlsl", "index": dev.index, "name": dev.name,
                                      "properties": dev.properties})
            if not dev.usable:
                missing.append({"what": f"Vulkan 1.2 on {dev.name}",
                                "why": f"the driver supports Vulkan {dev.properties['api_version']} only",
                                "fix": "update the GPU driver (or Mesa)"})
        if not devices:
            missing.append({"what": "Vulkan device", "why": "the Vulkan loader found no device with a compute queue",
                            "fix": "apt-get install mesa-vulkan-drivers (lavapipe, CPU) or the GPU vendor's driver"})
    except Exception as exc:
        missing.append({"what": "Vulkan", "why": f"{type(exc).__name__}: {exc}",
                        "fix": "check vulkaninfo; apt-get install libvulkan1 mesa-vulkan-drivers"})
    return report
