"""HIP on an AMD GPU through hip-python: hiprtc compile, HIP-runtime launches, HIP-event timing.

NOT VERIFIED ON AMD HARDWARE: no AMD GPU was available while this was written. It follows hip-python's documented
API (the hiprtc and hipModuleLaunchKernel examples) and the CUDA executor's structure: same geometry check, same
poison/flush/time protocol, buffers as host copies (xp = numpy, as on Vulkan). hip-python is optional; every
import of it is guarded so that the rest of peak-mcp never needs it.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from peak_mcp.backends.base import Compiled, CompileFailed, DeviceFacts, Executor, Regions
from peak_mcp.backends.cuda import CudaExecutor
from peak_mcp.backends.hip_errors import check as _check
from peak_mcp.backends.hip_portability import SOURCE_NAME, include_refusal_log
from peak_mcp.backends.includes import sanitize_log
from peak_mcp.core.errors import InvalidInput
from peak_mcp.core.launch import LaunchSpec

INSTALL = "pip install hip-python (the release matching your ROCm, e.g. 'hip-python~=6.2.0')"


def _hip() -> Any:
    from hip import hip  # optional dependency

    return hip


def device_count() -> int:
    try:
        return int(_check(_hip().hipGetDeviceCount()))
    except Exception:
        return 0


def _text(value: Any) -> str:
    return value.decode(errors="replace").split("\0")[0] if isinstance(value, bytes | bytearray) else str(value)


@dataclass
class Buffer:
    ptr: int
    nbytes: int


class HipAmdExecutor(Executor):
    backend = "hip"
    xp = np
    check_geometry = CudaExecutor.check_geometry  # the same limits, read from the same fact names

    def __init__(self, index: int, arch: str | None = None, flush: bool = True) -> None:
        hip = self.hip = _hip()
        _check(hip.hipSetDevice(index))
        props = hip.hipDeviceProp_t()
        _check(hip.hipGetDeviceProperties(props, index))
        full_arch = _text(props.gcnArchName)  # e.g. gfx90a:sramecc+:xnack-
        self.arch = arch or full_arch.split(":")[0]
        self.facts = DeviceFacts("hip", index, _text(props.name) or self.arch, {
            "arch": self.arch, "platform": "amd", "gcn_arch_name": full_arch,
            "sm_count": props.multiProcessorCount, "l2_bytes": props.l2CacheSize,
            "shared_per_block_bytes": props.sharedMemPerBlock,
            "shared_per_block_optin_bytes": props.sharedMemPerBlock,  # LDS has no opt-in tier
            "max_threads_per_block": props.maxThreadsPerBlock, "warp_size": props.warpSize,
            "clock_khz": props.clockRate, "memory_clock_khz": props.memoryClockRate,
            "memory_bus_bits": props.memoryBusWidth})
        self.max_grid = tuple(props.maxGridSize)[:3]
        self.max_block = tuple(props.maxThreadsDim)[:3]
        self.stream = _check(hip.hipStreamCreate())
        # MI300's 256 MB Infinity Cache sits behind L2: flush past both.
        flush_bytes = max(2 * props.l2CacheSize, 64 << 20, (512 << 20) if self.arch.startswith("gfx94") else 0)
        self.flush = self.alloc(flush_bytes) if flush else None

    # --- compile ---------------------------------------------------------------------------------------------
    def compile(self, source: str, spec: LaunchSpec) -> Compiled:
        from hip import hiprtc

        refused = include_refusal_log(source)
        if refused:
            raise CompileFailed(refused)
        program = _check(hiprtc.hiprtcCreateProgram(source.encode(), SOURCE_NAME.encode(), 0, [], []))
        try:
            options = [f"--offload-arch={self.arch}".encode(), b"-O3", b"-std=c++17"]
            err, = hiprtc.hiprtcCompileProgram(program, len(options), options)
            size = _check(hiprtc.hiprtcGetProgramLogSize(program))
            log = bytearray(size)
            if size:
                _check(hiprtc.hiprtcGetProgramLog(program, log))
            text = sanitize_log(_text(log).strip(), SOURCE_NAME)
            if int(err) != 0:
                raise CompileFailed(text or str(err))
            code = bytearray(_check(hiprtc.hiprtcGetCodeSize(program)))
            _check(hiprtc.hiprtcGetCode(program, code))
        finally:
            hiprtc.hiprtcDestroyProgram(program)
        module = _check(self.hip.hipModuleLoadData(code))
        try:
            kernel = _check(self.hip.hipModuleGetFunction(module, spec.entry.encode()))
        except RuntimeError:
            raise CompileFailed(f"{SOURCE_NAME}: entry '{spec.entry}' named on the peak: line (line "
                                f"{spec.line}) was not found in the compiled module; declare it extern \"C\" "
                                "__global__ with exactly that name") from None
        attr = self.hip.hipFunction_attribute
        resources: dict[str, Any] = {"arch": self.arch, "platform": "amd"}
        for key, name in (("registers", "HIP_FUNC_ATTRIBUTE_NUM_REGS"),
                          ("static_shared_bytes", "HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES"),
                          ("local_bytes", "HIP_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"),
                          ("max_threads_per_block", "HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK")):
            with contextlib.suppress(Exception):  # an attribute this HIP release lacks is left out
                resources[key] = int(_check(self.hip.hipFuncGetAttribute(getattr(attr, name), kernel)))
        compiled = Compiled(handle=kernel, spec=spec, resources=resources, log=text)
        compiled.module = module  # type: ignore[attr-defined]  # keeps the module loaded with its kernel
        return compiled

    # --- memory ----------------------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> Buffer:
        try:
            return Buffer(int(_check(self.hip.hipMalloc(nbytes))), nbytes)
        except RuntimeError as exc:
            raise InvalidInput(f"out of GPU memory allocating {nbytes:,} bytes on {self.facts.name} ({exc})",
                               "choose smaller sizes.") from None

    def free(self, buf: Buffer) -> None:
        _check(self.hip.hipFree(buf.ptr))

    def write(self, buf: Buffer, data: Any, offset: int = 0) -> None:
        host = np.ascontiguousarray(np.asarray(data).reshape(-1).view(np.uint8))
        _check(self.hip.hipMemcpy(buf.ptr + offset, host, host.nbytes, self.hip.hipMemcpyKind.hipMemcpyHostToDevice))

    def read(self, buf: Buffer, nbytes: int, offset: int = 0) -> np.ndarray:
        host = np.empty(nbytes, np.uint8)
        _check(self.hip.hipMemcpy(host, buf.ptr + offset, nbytes, self.hip.hipMemcpyKind.hipMemcpyDeviceToHost))
        return host

    def pointer(self, buf: Buffer, offset: int) -> Any:
        return ctypes.c_void_p(buf.ptr + offset)

    # --- launch ----------------------------------------------------------------------------------------------
    def _launch(self, kernel: Compiled, geometry: dict[str, Any], buffers: list[Any], scalars: list[int]) -> None:
        _check(self.hip.hipModuleLaunchKernel(
            kernel.handle, *geometry["grid"], *geometry["block"], sharedMemBytes=geometry["shared"],
            stream=self.stream, kernelParams=None, extra=(*buffers, *(ctypes.c_int(s) for s in scalars))))

    def run(self, kernel: Compiled, buffers: list[Any], scalars: list[int], geometry: dict[str, Any]) -> None:
        self._launch(kernel, geometry, buffers, scalars)
        _check(self.hip.hipStreamSynchronize(self.stream))

    def time(self, kernel: Compiled, buffer_sets: list[list[Any]], scalars: list[int], geometry: dict[str, Any],
             reps: int, cold_cache: bool, poison: list[Regions] | None = None,
             after_each: Callable[[int], None] | None = None) -> list[float]:
        # after_each is for device arrays; these buffers are checked through host copies after the loop.
        def before(rep: int) -> None:
            for pointer, nbytes in poison[rep % len(poison)] if poison else ():
                _check(self.hip.hipMemsetAsync(pointer.value, 0xFF, nbytes, self.stream))
            if cold_cache:
                self.flush_l2(rep)

        return self.event_times(reps, before, lambda rep: self._launch(kernel, geometry,
                                                                       buffer_sets[rep % len(buffer_sets)], scalars))

    def flush_l2(self, value: int) -> None:
        if self.flush is not None:
            _check(self.hip.hipMemsetD32Async(self.flush.ptr, value, self.flush.nbytes // 4, self.stream))

    def event_times(self, reps: int, before: Callable[[int], None], launch: Callable[[int], None]) -> list[float]:
        """HIP-event milliseconds of `launch(rep)` for each rep, `before(rep)` enqueued ahead of its start event;
        one synchronization at the end. Kernels and the hipBLAS yardstick are timed by this same loop."""
        hip, pairs = self.hip, []
        for rep in range(reps):
            before(rep)
            start, end = _check(hip.hipEventCreate()), _check(hip.hipEventCreate())
            _check(hip.hipEventRecord(start, self.stream))
            launch(rep)
            _check(hip.hipEventRecord(end, self.stream))
            pairs.append((start, end))
        _check(hip.hipStreamSynchronize(self.stream))
        times = [float(_check(hip.hipEventElapsedTime(start, end))) for start, end in pairs]
        for start, end in pairs:
            hip.hipEventDestroy(start)
            hip.hipEventDestroy(end)
        return times

    def baseline(self, yardstick: str, dtype: str, sizes: dict[str, int], inputs: dict[str, np.ndarray],
                 reps_budget_s: float) -> dict[str, Any]:
        if yardstick != "gemm":
            return {"available": False, "reason": f"HIP has no {yardstick!r} vendor yardstick (only gemm: hipBLAS)"}
        try:
            from peak_mcp.backends.hipblas_baseline import time_hipblas_matmul

            return time_hipblas_matmul(self, dtype, sizes, inputs, reps_budget_s)
        except ImportError as exc:
            return {"available": False, "reason": f"hip-python's hipblas module is missing ({exc}): install hipBLAS "
                                                  f"(ROCm) and {INSTALL}"}
        except Exception as exc:  # unverified on AMD hardware: a failing yardstick must not fail the session
            return {"available": False, "reason": f"the hipBLAS baseline failed: {type(exc).__name__}: {exc}"}

    def close(self) -> None:
        if self.flush is not None:
            self.free(self.flush)
            self.flush = None


def probe() -> dict[str, Any]:
    """AMD devices through hip-python, or why there are none. Never raises."""
    report: dict[str, Any] = {"backend": "hip", "devices": [], "compiler": {"available": False, "name": "hiprtc"},
                              "missing": []}
    try:
        hip = _hip()
        from hip import hiprtc  # noqa: F401 - the compiler half of the package
    except Exception as exc:
        report["missing"].append({"what": "hip-python", "why": f"not installed ({type(exc).__name__}): HIP kernels "
                                  "cannot run on AMD GPUs here (this path is not verified on AMD hardware)",
                                  "fix": INSTALL})
        return report
    report["compiler"]["available"] = True
    try:
        for index in range(device_count()):
            props = hip.hipDeviceProp_t()
            _check(hip.hipGetDeviceProperties(props, index))
            arch = _text(props.gcnArchName).split(":")[0]
            report["devices"].append({"backend": "hip", "index": index, "name": _text(props.name) or arch,
                                      "properties": {"arch": arch, "platform": "amd",
                                                     "sm_count": props.multiProcessorCount}})
    except Exception as exc:
        report["missing"].append({"what": "AMD GPU", "why": f"{type(exc).__name__}: {exc}",
                                  "fix": "check the ROCm driver (rocminfo, /dev/kfd)"})
    return report
