"""HLSL backend: the executor (compile, run and time through Vulkan) and the probe; the registry imports this module.

ABI (problem.arguments order): buffers are storage buffers at [[vk::binding(0..n-1)]] in set 0; scalar arguments
are consecutive 32-bit uints in one push-constant block. The thread-group size is the shader's [numthreads]; the
annotation gives the dispatch size: `// peak: entry=main groups=(cdiv(N, 16), cdiv(M, 16), 1)`.

Compiling is hlsl_compiler's job (dxc or glslangValidator), reading the SPIR-V is spirv's, talking to the device
is vulkan_runtime's. Here the reflected module is checked against the ABI and the device, for what the agent
should see (numthreads, groupshared bytes, bindings, capabilities) and for what must be refused before the driver
sees it: limits the device cannot launch and features it lacks (16-bit floats above all).
"""

from __future__ import annotations

import collections
import hashlib
import re
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from peak_mcp.backends.base import Compiled, CompileFailed, DeviceFacts, Executor, KernelFault, Regions
from peak_mcp.backends.hlsl_compiler import SOURCE_NAME, Compiler, compile_to_spirv, find_compiler
from peak_mcp.backends.includes import check_source, refusal_log
from peak_mcp.backends.spirv import CAPABILITY_FEATURES, SpirvInfo, reflect
from peak_mcp.core.errors import InvalidInput
from peak_mcp.core.launch import LaunchSpec

_CACHE_SIZE = 64  # compiled modules and pipelines kept per executor


def _abi_problems(info: SpirvInfo) -> list[str]:
    """Descriptors the ABI cannot feed: only single storage buffers in set 0 are bound."""
    problems = []
    for b in info.bindings:
        where = f"`{b.name}` (set {b.set}, binding {b.binding})"
        if b.kind != "storage_buffer":
            extra = (" — a cbuffer, or a global variable without `static` (HLSL puts those in a $Globals constant "
                     "buffer)" if b.kind == "uniform_buffer" else "")
            problems.append(f"{where} is a {b.kind.replace('_', ' ')}{extra}; the ABI binds only storage buffers "
                            "(StructuredBuffer / ByteAddressBuffer and their RW variants)")
        elif b.set != 0:
            problems.append(f"{where}: only descriptor set 0 is bound; use [[vk::binding(N)]] or [[vk::binding(N, 0)]]")
        elif b.count != 1:
            problems.append(f"{where} is an array of buffers; declare one buffer per binding")
        elif b.binding < 0:
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
    sanitizer = True  # the Khronos validation layer's GPU-assisted validation, where installed (vulkan_sanitizer)

    def __init__(self, index: int | None, *, fence_timeout_s: float = 30.0, compiler: str | None = None,
                 compile_timeout_s: float = 60.0) -> None:
        self.compiler: Compiler | None = find_compiler(compiler)
        self.compile_timeout_s = compile_timeout_s
        self._spirv_cache: collections.OrderedDict[str, tuple[bytes, str]] = collections.OrderedDict()
        self._pipelines: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self.device: Any = None
        compiler_facts = {"compiler": self.compiler.name if self.compiler else None}
        if index is None:
            self.facts = DeviceFacts("hlsl", -1, "compile-only (no Vulkan device)", compiler_facts)
            return
        from peak_mcp.backends.vulkan_runtime import VulkanDevice

        self.device = VulkanDevice(index, fence_timeout_s=fence_timeout_s, l2_lookup=_profile_l2_bytes)
        phys = self.device.physical
        timing = ("timestamp queries" if self.device.timestamps else
                  "host wall-clock around submit+wait (the queue has no timestamp support; includes submit "
                  "overhead)")
        self.facts = DeviceFacts("hlsl", index, phys.name, {
            **phys.properties, **compiler_facts, "timing": timing, "cache_flush_bytes": self.device.flush_bytes,
            "fence_timeout_s": fence_timeout_s})

    def baseline(self, yardstick: str, dtype: str, sizes: dict[str, int], inputs: dict[str, Any],
                 reps_budget_s: float) -> dict[str, Any]:
        """On a CPU device (lavapipe) gemm is the same CPU's BLAS through numpy; a GPU's Vulkan has no vendor
        library."""
        if yardstick != "gemm" or self.facts.properties.get("device_type") != "cpu":
            return super().baseline(yardstick, dtype, sizes, inputs, reps_budget_s)
        from peak_mcp.backends.cpu_baseline import time_numpy_matmul

        # each call from a cold cache: the scratch the kernels' launches flush with is as large
        return time_numpy_matmul(dtype, sizes, inputs, reps_budget_s, flush_bytes=self.device.flush_bytes)

    # --- compile ---------------------------------------------------------------------------------------------
    def compile(self, source: str, spec: LaunchSpec) -> Compiled:
        return self.load(self.build(source, spec))

    def load(self, kernel: Compiled) -> Compiled:
        """The driver-side compile, on the thread that launches: the pipeline cache evicts (destroys) pipelines,
        and the `vulkan` binding's call machinery is not safe across threads (a tune on the H100 crashed when
        build threads made pipelines beside timed dispatches)."""
        if self.device is not None:
            self._pipeline(kernel.handle)  # now, so that its errors read as compile errors
        return kernel

    def build(self, source: str, spec: LaunchSpec) -> Compiled:
        """SPIR-V and its checks, without the device: safe on a build thread."""
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
        # glslang only warns when the entry is missing, and emits an empty shader of that name: its entry points
        # then list the missing name itself, so the functions to name are read from the source.
        if spec.entry not in info.entry_points or "Entry point not found" in log:
            raise CompileFailed(missing_entry(source, spec.entry, spec.line))
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
        x, y, z = info.local_size or (0, 0, 0)
        resources: dict[str, Any] = {
            "numthreads": [x, y, z], "threads_per_group": x * y * z, "groupshared_bytes": info.groupshared_bytes,
            "push_constant_bytes": info.push_constant_bytes, "spirv_bytes": len(spirv),
            "compiler": self.compiler.name, "bindings": [{"binding": b.binding, "name": b.name} for b in info.bindings],
            "capabilities": info.capability_names(),
        }
        return Compiled(handle=kernel, spec=spec, resources=resources, log=log)

    def _to_spirv(self, source: str, entry: str) -> tuple[bytes, str]:
        assert self.compiler is not None
        key = hashlib.sha256(f"{self.compiler.path}\0{entry}\0{source}".encode()).hexdigest()
        if key in self._spirv_cache:
            self._spirv_cache.move_to_end(key)
            return self._spirv_cache[key]
        spirv, log = compile_to_spirv(self.compiler, source, entry, self.compile_timeout_s)
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
        storage = [b.binding for b in kernel.info.bindings]
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
                names = {b.binding: b.name for b in kernel.handle.info.bindings}
                raise InvalidInput(f"binding {i} ({names.get(i, 'unnamed')}) is {buf.size - offset} bytes, over the "
                                   "device's "
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
        from peak_mcp.core.devices import load_profiles, match_profile

        profile = match_profile(device_name, load_profiles())
        return int(profile.l2_mb * (1 << 20)) if profile and profile.l2_mb else None
    except Exception:
        return None


def open_executor(index: int | None, **options: Any) -> HlslExecutor:
    return HlslExecutor(index, **options)


# --- probe -----------------------------------------------------------------------------------------------------

_VK_NAME = re.compile(r"^Vk(Error\w+)$")


def probe(compiler: str | None = None) -> dict[str, Any]:
    """Devices and compiler, with the reason and the fix for whatever is missing. Never raises."""
    report: dict[str, Any] = {"backend": "hlsl", "devices": [], "compiler": {"available": False}, "missing": []}
    missing = report["missing"]
    from peak_mcp.backends.toolkit import layer_manifest, validation_layer_missing

    report["tools"] = {"vulkan-validation-layer": layer_manifest()}
    if report["tools"]["vulkan-validation-layer"] is None:
        missing.append(validation_layer_missing())
    try:
        found = find_compiler(compiler)
        if found:
            report["compiler"] = {"available": True, "name": found.name, "version": found.version(),
                                  "path": found.path}
        else:
            missing.append({"what": "HLSL compiler", "why": "neither dxc nor glslangValidator is on PATH",
                            "fix": "apt-get install glslang-tools (or put DirectXShaderCompiler's dxc on PATH)"})
    except Exception as exc:
        missing.append({"what": "HLSL compiler", "why": f"{type(exc).__name__}: {exc}",
                        "fix": "apt-get install glslang-tools"})
    try:
        from peak_mcp.backends.vulkan_devices import create_instance, load_binding, physical_devices

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


_NUMTHREADS_FUNCTION = re.compile(r"\[\s*numthreads\s*\([^)]*\)\s*\](?:\s*\[[^\]]*\])*\s*\w+\s+(\w+)\s*\(")


def missing_entry(source: str, entry: str, line: int) -> str:
    """The peak: line names a function the kernel does not define as a compute entry: say which it does."""
    found = list(dict.fromkeys(_NUMTHREADS_FUNCTION.findall(source)))
    if not found:
        return (f"{SOURCE_NAME}:{line}: entry '{entry}' named on the peak: line is not a [numthreads(...)] function "
                f"of the kernel, and the kernel has none; mark the entry function [numthreads(X, Y, Z)]")
    fix = (f"set entry={found[0]} on the peak: line, or rename that function to {entry}" if len(found) == 1
           else "set entry= on the peak: line to one of them")
    return (f"{SOURCE_NAME}:{line}: entry '{entry}' named on the peak: line is not a [numthreads(...)] function "
            f"of the kernel; its [numthreads(...)] function{'s' if len(found) > 1 else ''}: {', '.join(found)}; "
            f"{fix}")
