"""CUDA backend on cuda-python: NVRTC compile (cuda.core.Program), cuda.core launches, CUDA-event timing.

Compilation needs no GPU, so a compile-only executor (index=None) serves CPU-only machines.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from peak_mcp.backends.base import Compiled, CompileFailed, DeviceFacts, Executor, KernelFault, Regions
from peak_mcp.backends.cold_l2 import ColdL2
from peak_mcp.backends.cubin import kernel_names, persistent_state
from peak_mcp.backends.cuda_extended import ExtendedLaunch
from peak_mcp.backends.includes import check_source, refusal_log, sanitize_log, short_paths
from peak_mcp.backends.nvrtc_child import NvrtcChildren
from peak_mcp.backends.tensor_maps import unencodable_note
from peak_mcp.core.errors import DeviceMemory, InvalidInput
from peak_mcp.core.launch import LaunchSpec

# Headers the project ships for kernels to include (`#include <peak/hopper.cuh>`): tested device code for what an
# agent gets wrong by hand (descriptor bit fields, barrier protocols). Searched first; it holds only peak/.
PEAK_INCLUDE_DIR = str(Path(__file__).resolve().parent.parent / "include")
DEFAULT_ARCH = "sm_90a"  # compile-only target when no GPU is present and none is configured (Settings.cuda_arch)
_STICKY_ERRORS = ("ILLEGAL_ADDRESS", "LAUNCH_FAILED", "MISALIGNED_ADDRESS", "ILLEGAL_INSTRUCTION",
                  "HARDWARE_STACK_ERROR", "ASSERT", "INVALID_PC", "LAUNCH_TIMEOUT", "ECC_UNCORRECTABLE",
                  "CONTEXT_IS_DESTROYED", "EXCEPTION", "TRAP")
_PTXAS = {
    "registers": re.compile(r"Used (\d+) registers"),
    "stack_frame_bytes": re.compile(r"(\d+) bytes stack frame"),
    "spill_store_bytes": re.compile(r"(\d+) bytes spill stores"),
    "spill_load_bytes": re.compile(r"(\d+) bytes spill loads"),
    "static_shared_bytes": re.compile(r"(\d+) bytes smem"),
}


def cuda_include_dirs() -> list[str]:
    """CUDA headers for NVRTC (cuda_fp16.h, mma.h, CCCL's cub and libcu++, ...): the pip wheels first, then a local
    toolkit.

    The cudart wheel alone lacks crt/ (mma.h includes crt/mma.h; it ships in nvidia-cuda-crt), as on images with
    the CUDA toolkit but not that wheel. Then a tree that has crt/ comes after the wheel's, so that the wheel's own
    headers still win and only what it lacks comes from elsewhere."""
    dirs: list[Path] = []
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        # cccl: libcu++ (<cuda/barrier>, <cuda/pipeline>), CUB and <nv/target>, which <cooperative_groups.h> needs
        for name in ("cudart", "cccl"):
            found = find_nvidia_header_directory(name)
            if found and Path(found) not in dirs:
                dirs.append(Path(found))
    except Exception:
        pass
    toolkits = [Path(h) / "include" for h in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                                              "/usr/local/cuda") if h]
    if not any(_has_crt(d) for d in dirs):
        wheel_trees = [Path(p) / "nvidia" / "cu13" / "include" for p in sys.path if p]
        extra = next((d for d in [*wheel_trees, *toolkits] if _has_crt(d) and d not in dirs), None)
        if extra is not None:
            dirs.append(extra)
    return [str(d) for d in dirs]


def _has_crt(include_dir: Path) -> bool:
    return (include_dir / "crt" / "mma.h").is_file() and (include_dir / "cuda_runtime.h").is_file()


def _parse_ptxas(log: str) -> dict[str, int]:
    found = {}
    for key, pattern in _PTXAS.items():
        match = pattern.search(log)
        if match:
            found[key] = int(match.group(1))
    return found


def _check(result: Any) -> Any:
    """Unwrap a cuda.bindings (err, *values) tuple, raising on error."""
    from cuda.bindings import driver

    err, *values = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(err)
        raise _as_fault(RuntimeError(name.decode() if name else str(err)))
    return values[0] if len(values) == 1 else values


def _as_fault(exc: Exception) -> Exception:
    text = str(exc)
    if any(code in text for code in _STICKY_ERRORS):
        return KernelFault(f"the kernel faulted: {text.strip()}. The device context is lost; the worker restarts. "
                           "Look for out-of-bounds indexing (check the guards on every load and store against "
                           "the size arguments) or misaligned vector accesses.")
    return exc


def _launch_error(exc: Exception, geometry: dict[str, Any]) -> Exception:
    """What a failed launch raises: refused input as it is; anything else as a fault where the driver says so, which
    names a tensor map passed as zeros as the likely cause."""
    if isinstance(exc, InvalidInput):
        return exc
    fault = exc if isinstance(exc, KernelFault) else _as_fault(exc)
    note = unencodable_note(geometry)
    if note is None or not isinstance(fault, KernelFault):
        return fault
    return KernelFault(f"{fault} Likely cause: {note}.", fault.kind)


class CudaExecutor(Executor):
    backend = "cuda"
    sanitizer = True  # HIP on NVIDIA inherits it: the same driver runs its launches
    source_name = "kernel.cu"  # what diagnostics call the agent's file
    pre_include: str | None = None  # a header NVRTC reads before the source (the HIP backend's device header)
    extended_launches = True  # tensor_map lines and cluster= (TMA and clusters: CUDA on sm_90+)

    def sandbox_dirs(self) -> list[str]:
        """Where the agent's own #include lines may reach (NVRTC's include path may hold more)."""
        return self.include_dirs

    def __init__(self, index: int | None, arch: str | None = None, flush: bool = True) -> None:
        self.include_dirs = [PEAK_INCLUDE_DIR, *cuda_include_dirs()]
        self.nvrtc = NvrtcChildren()
        self.device = None
        if index is None:
            self.arch = arch or DEFAULT_ARCH
            self.facts = DeviceFacts("cuda", -1, "compile-only (no GPU)", {"arch": self.arch})
            return
        from cuda.core import Device

        self.device = Device(index)
        self.device.set_current()
        self.stream = self.device.create_stream()
        props = self.device.properties
        major, minor = props.compute_capability_major, props.compute_capability_minor
        # sm_90a unlocks wgmma/setmaxnreg; kernels built for it run only on 9.0, which is this device.
        self.arch = arch or (f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}")
        self.facts = DeviceFacts("cuda", index, self.device.name, {
            "arch": self.arch,
            "compute_capability": f"{major}.{minor}",
            "sm_count": props.multiprocessor_count,
            "l2_bytes": props.l2_cache_size,
            "shared_per_block_bytes": props.max_shared_memory_per_block,
            "shared_per_block_optin_bytes": props.max_shared_memory_per_block_optin,
            "shared_per_sm_bytes": props.max_shared_memory_per_multiprocessor,
            "registers_per_sm": props.max_registers_per_multiprocessor,
            "max_threads_per_block": props.max_threads_per_block,
            "warp_size": props.warp_size,
            "clock_khz": props.clock_rate,
            "memory_clock_khz": props.memory_clock_rate,
            "memory_bus_bits": props.global_memory_bus_width,
        })
        self.max_grid = (props.max_grid_dim_x, props.max_grid_dim_y, props.max_grid_dim_z)
        self.max_block = (props.max_block_dim_x, props.max_block_dim_y, props.max_block_dim_z)
        # Buffers are cupy arrays on this executor's stream, so the validator computes on the device (inputs,
        # float64 reference, checks) and only verdicts cross to the host.
        try:
            import cupy
        except ImportError as exc:
            raise RuntimeError(f"running CUDA kernels needs cupy ({exc}): pip install 'peak-mcp[cuda]' "
                               "(cupy-cuda13x)") from None
        cupy.cuda.Device(index).use()
        cupy.cuda.ExternalStream(int(self.stream.handle), index).use()
        self.xp = cupy
        # flush=False (compute-sanitizer's run): no allocation beside the kernel's buffers, where a stray write
        # would land unseen by memcheck.
        self.cold = ColdL2(cupy, props.l2_cache_size) if flush else None

    # --- compile ---------------------------------------------------------------------------------------------
    def compile(self, source: str, spec: LaunchSpec) -> Compiled:
        return self.load(self.build(source, spec))

    def build(self, source: str, spec: LaunchSpec) -> Compiled:
        """NVRTC to a cubin and the checks on it; loading the module (which may synchronize the context) waits
        for `load`."""
        refused = check_source(source, self.sandbox_dirs())  # before NVRTC may open any file
        if refused:
            raise CompileFailed(refusal_log(refused, self.source_name))
        options = {"arch": self.arch, "std": "c++17", "include_path": self.include_dirs, "name": self.source_name,
                   "ptxas_options": ["-v"], "lineinfo": True, "pre_include": self.pre_include}
        try:
            cubin, log = self.nvrtc.compile(source, options, self.source_name)
        except CompileFailed as failed:
            if failed.reason:
                raise
            text = failed.log.split("compilation log:", 1)[-1].strip() if "compilation log:" in failed.log \
                else failed.log
            raise CompileFailed(self.cleaned(text)) from None
        kept = persistent_state(cubin)
        if kept:
            raise CompileFailed(
                f"{self.source_name}: the module keeps state between launches: {', '.join(kept)}. A kernel must do "
                "all of its work on every launch from its arguments alone; use registers or __shared__ memory for "
                "scratch, __constant__ for tables, and no device malloc. A `constexpr` or `const` variable at "
                "namespace scope is emitted as such a variable too: make it a #define, a constexpr inside the "
                "kernel, or __constant__")
        kernels = kernel_names(cubin)
        if spec.entry not in kernels:  # after preprocessing: under `#if 0` the entry exists only as text
            raise CompileFailed(
                f"{self.source_name}: entry '{spec.entry}' named on the peak: line (line {spec.line}) is not a kernel "
                f"of the compiled module (kernels: {', '.join(sorted(kernels)) or 'none'}); declare it "
                "extern \"C\" __global__ with exactly that name, outside any #if that is false")
        ptxas = self.cleaned(log)
        resources: dict[str, Any] = {"arch": self.arch, **_parse_ptxas(ptxas)}
        return Compiled(handle=None, spec=spec, resources=resources, log=ptxas.strip(), binary=cubin,
                        pending=cubin if self.device is not None else None)

    def cleaned(self, log: str) -> str:
        """NVRTC's output with diagnostics about other files withheld and toolkit paths shown as `<cuda>/...`."""
        return short_paths(sanitize_log(log.replace("\x00", "").strip(), self.source_name, self.include_dirs),
                           {d: "<peak>" if d == PEAK_INCLUDE_DIR else "<hip>" if Path(d).name == "hip_include"
                            else "<cuda>" for d in self.include_dirs})

    def close(self) -> None:
        self.nvrtc.close()
        if self.device is not None:  # cupy's current stream is this executor's, which goes away with it
            self.xp.cuda.Stream.null.use()

    def load(self, kernel: Compiled) -> Compiled:
        if kernel.pending is None:
            return kernel
        from cuda.core import ObjectCode

        module, kernel.pending = ObjectCode.from_cubin(kernel.pending), None
        entry = kernel.spec.entry
        try:
            kernel.handle = module.get_kernel(entry)
        except Exception:
            raise CompileFailed(
                f"{self.source_name}: entry '{entry}' named on the peak: line (line {kernel.spec.line}) was not "
                "found in the compiled module; declare it extern \"C\" __global__ with exactly that name") from None
        attrs = kernel.handle.attributes
        kernel.resources.update(registers=attrs.num_regs, static_shared_bytes=attrs.shared_size_bytes,
                                local_bytes=attrs.local_size_bytes, max_threads_per_block=attrs.max_threads_per_block)
        return kernel

    # --- memory ----------------------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> Any:
        self._need_device()
        try:
            return self.xp.empty(nbytes, self.xp.uint8)
        except self.xp.cuda.memory.OutOfMemoryError:
            free, total = self.xp.cuda.runtime.memGetInfo()  # after cupy gave its cached blocks back
            raise DeviceMemory(f"out of GPU memory allocating a buffer of {nbytes:,} bytes on {self.facts.name}, not "
                               f"because of the kernel: {free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB "
                               "(other sessions' buffers on this device count too)",
                               "choose smaller sizes, or submit again once other sessions' jobs are done.") from None

    def free(self, buf: Any) -> None:
        pass  # cupy returns the memory to its pool when the last reference goes

    def write(self, buf: Any, data: Any, offset: int = 0) -> None:
        data = self.xp.asarray(data).reshape(-1)
        buf[offset:offset + data.size] = data

    def read(self, buf: Any, nbytes: int, offset: int = 0) -> Any:
        return buf[offset:offset + nbytes].copy()

    def pointer(self, buf: Any, offset: int) -> Any:
        return np.uint64(buf.data.ptr + offset)  # a 64-bit kernel parameter, as a pointer is

    # --- launch ----------------------------------------------------------------------------------------------
    def check_geometry(self, kernel: Compiled, geometry: dict[str, Any]) -> str | None:
        grid, block, shared = geometry["grid"], geometry["block"], geometry["shared"]
        for axis, (g, limit) in enumerate(zip(grid, self.max_grid, strict=True)):
            if g > limit:
                return f"grid dimension {'xyz'[axis]}={g} exceeds the device limit {limit}"
        threads = block[0] * block[1] * block[2]
        limit = kernel.resources.get("max_threads_per_block", 1024)
        if threads > limit or any(b > m for b, m in zip(block, self.max_block, strict=True)):
            return (f"block={block} ({threads} threads) exceeds what this kernel can launch with ({limit} threads: "
                    f"{kernel.resources.get('registers', '?')} registers per thread); lower the block size or add "
                    "__launch_bounds__")
        why = self._check_extended(geometry)
        if why:
            return why
        static = kernel.resources.get("static_shared_bytes", 0)
        optin = self.facts.properties["shared_per_block_optin_bytes"]
        if static + shared > optin:
            return (f"static ({static} B) + dynamic ({shared} B) shared memory exceeds the per-block limit of "
                    f"{optin} B on {self.facts.name}")
        return None

    def _check_extended(self, geometry: dict[str, Any]) -> str | None:
        cluster, maps = geometry.get("cluster"), geometry.get("tensor_maps")
        if not cluster and not maps:
            return None
        what = "tensor_map lines" if maps else "cluster="
        if not self.extended_launches:
            return f"{what} are for CUDA sessions only; this {self.backend} kernel gets buffers and scalars alone"
        major = int(self.facts.properties.get("compute_capability", "0.0").split(".")[0])
        if major < 9:
            return f"{what} need compute capability 9.0 or newer (TMA and clusters); {self.facts.name} has {major}.x"
        if cluster and cluster[0] * cluster[1] * cluster[2] > 8:
            return f"cluster={cluster} has more than 8 blocks, the portable limit"
        return None

    def _config(self, kernel: Compiled, geometry: dict[str, Any]) -> Any:
        from cuda.core import LaunchConfig

        shared = geometry["shared"]
        if shared > 48 * 1024 and not getattr(kernel, "_optin", False):
            from cuda.bindings import driver

            attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            _check(driver.cuKernelSetAttribute(attr, shared, kernel.handle.handle, self.device.device_id))
            kernel._optin = True  # type: ignore[attr-defined]
        if geometry.get("cluster") or geometry.get("tensor_maps"):
            why = self._check_extended(geometry)
            if why:
                raise InvalidInput(why, None)
            return ExtendedLaunch(geometry["grid"], geometry["block"], shared, geometry.get("cluster"),
                                  list(geometry.get("tensor_maps", ())))
        return LaunchConfig(grid=geometry["grid"], block=geometry["block"], shmem_size=shared)

    def _launch(self, kernel: Compiled, config: Any, buffers: list[Any], scalars: list[int]) -> None:
        from cuda.core import launch

        if isinstance(config, ExtendedLaunch):
            if getattr(kernel, "_function", None) is None:
                from cuda.bindings import driver

                kernel._function = _check(driver.cuKernelGetFunction(kernel.handle.handle))  # type: ignore[attr-defined]
            config.launch(kernel._function, self.stream.handle, buffers, scalars, _check)  # type: ignore[attr-defined]
            return
        args = [*buffers, *(np.int32(s) for s in scalars)]
        launch(self.stream, config, kernel.handle, *args)

    def run(self, kernel: Compiled, buffers: list[Any], scalars: list[int], geometry: dict[str, Any]) -> None:
        try:
            self._launch(kernel, self._config(kernel, geometry), buffers, scalars)
            self.stream.sync()
        except Exception as exc:
            raise _launch_error(exc, geometry) from None

    def time(self, kernel: Compiled, buffer_sets: list[list[Any]], scalars: list[int], geometry: dict[str, Any],
             reps: int, cold_cache: bool, poison: list[Regions] | None = None,
             after_each: Callable[[int], None] | None = None) -> list[float]:
        from cuda.bindings import driver
        from cuda.core import EventOptions

        timing = EventOptions(timing_enabled=True)
        config = self._config(kernel, geometry)
        try:
            pairs = []
            for rep in range(reps):
                for pointer, nbytes in poison[rep % len(poison)] if poison else ():
                    _check(driver.cuMemsetD8Async(int(pointer), 0xFF, nbytes, self.stream.handle))
                if cold_cache and self.cold is not None:
                    self.cold.flush(rep)  # on cupy's current stream: this executor's
                start = self.stream.record(options=timing)
                self._launch(kernel, config, buffer_sets[rep % len(buffer_sets)], scalars)
                pairs.append((start, self.stream.record(options=timing)))
                if after_each is not None:
                    after_each(rep)
            self.stream.sync()
            return [end - start for start, end in pairs]
        except Exception as exc:
            raise _launch_error(exc, geometry) from None

    # --- vendor baseline -------------------------------------------------------------------------------------
    def baseline(self, yardstick: str, dtype: str, sizes: dict[str, int], inputs: dict[str, np.ndarray],
                 reps_budget_s: float) -> dict[str, Any]:
        if yardstick != "gemm":
            return {"available": False, "reason": f"CUDA has no {yardstick!r} vendor yardstick (only gemm: cuBLAS)"}
        try:
            from peak_mcp.backends.cublas_baseline import time_cublas_matmul
        except ImportError as exc:
            return {"available": False, "reason": f"no maintained cuBLAS binding is installed ({exc}); "
                                                  "pip install cupy-cuda13x (or nvmath-python)"}
        self.stream.sync()
        return time_cublas_matmul(dtype, sizes, inputs, reps_budget_s, self.cold)

    def _need_device(self) -> None:
        if self.device is None:
            raise RuntimeError("this CUDA executor is compile-only (no GPU)")


def open_executor(index: int | None, **options: Any) -> CudaExecutor:
    return CudaExecutor(index, **options)


def probe(**_options: Any) -> dict[str, Any]:
    """Devices and compiler, with reasons and fixes for whatever is missing. Never raises."""
    report: dict[str, Any] = {"backend": "cuda", "devices": [], "compiler": {"available": False}, "missing": []}
    try:
        from cuda.bindings import nvrtc

        err, major, minor = nvrtc.nvrtcVersion()
        report["compiler"] = {"available": True, "name": "NVRTC", "version": f"{major}.{minor}",
                              "include_dirs": cuda_include_dirs()}
    except Exception as exc:
        report["missing"].append({"what": "NVRTC", "why": f"{type(exc).__name__}: {exc}",
                                  "fix": "pip install 'nvidia-cuda-nvrtc>=13,<14' 'nvidia-cuda-crt>=13,<14'"})
    from peak_mcp.backends.toolkit import find_tool, sanitizer_missing

    found = find_tool("compute-sanitizer")
    report["tools"] = {"compute-sanitizer": found}
    if found is None:
        report["missing"].append(sanitizer_missing())
    try:
        from cuda.bindings import driver

        err = driver.cuInit(0)[0]
        if err != driver.CUresult.CUDA_SUCCESS:
            name = driver.cuGetErrorName(err)[1].decode()
            why = "no NVIDIA driver or GPU" if "NO_DEVICE" in name or "INSUFFICIENT" in name else name
            report["missing"].append({"what": "CUDA GPU", "why": f"cuInit failed: {name} ({why})",
                                      "fix": "run on a machine with an NVIDIA GPU and driver >= 580; kernels "
                                             "still compile here (compile-only)"})
            return report
        count = _check(driver.cuDeviceGetCount())
        for index in range(count):
            name = _check(driver.cuDeviceGetName(256, index)).split(b"\0")[0].decode()
            attr = driver.CUdevice_attribute
            major = _check(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, index))
            minor = _check(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, index))
            sms = _check(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, index))
            report["devices"].append({"backend": "cuda", "index": index, "name": name,
                                      "properties": {"compute_capability": f"{major}.{minor}", "sm_count": sms}})
        if count and importlib.util.find_spec("cupy") is None:
            report["missing"].append({"what": "cupy", "why": "not installed: kernels compile but cannot run (device "
                                      "buffers, the GPU-side validator and the cuBLAS baseline use it)",
                                      "fix": "pip install 'peak-mcp[cuda]' (cupy-cuda13x)"})
        if not count:
            report["missing"].append({"what": "CUDA GPU", "why": "the driver reports no devices",
                                      "fix": "check nvidia-smi and CUDA_VISIBLE_DEVICES"})
    except Exception as exc:
        report["missing"].append({"what": "CUDA driver", "why": f"{type(exc).__name__}: {exc}",
                                  "fix": "install the NVIDIA driver (libcuda.so); kernels still compile here"})
    return report
