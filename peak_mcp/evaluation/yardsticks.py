"""Yardsticks for problems without a vendor library: the roofline and PyTorch (worker-side).

- `copy_bandwidth(device)`: device-to-device copy bandwidth in GB/s (bytes read plus bytes written), measured once
  per process and device with cupy: 1 GiB copied by cudaMemcpyAsync, timed with CUDA events under
  `peak_mcp.core.timing.measure` (its warm-up, budget and median, like every other timing here).
- `roofline_ms(flops, nbytes, peak_tflops, copy_gbps)`: the least time a kernel can take, max(flops / peak,
  bytes / bandwidth), and which of the two bounds it.
- `time_torch(fn, inputs, compile=..., budget_s=...)`: PyTorch eager or torch.compile timed on the workspace's
  device arrays (shared with torch through DLPack, no copy), from a cold L2 (a buffer of twice the L2 overwritten
  before every call, as the kernels and cuBLAS are timed), under `measure`. It never raises: a missing torch, a
  missing or failing torch.compile, a function that raises, come back as `available=False` with `why`.

Nothing here runs in the server process; torch and cupy are imported when called.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from peak_mcp.backends.cold_l2 import ColdL2
from peak_mcp.core.timing import Chunk, measure

COPY_BYTES = 1 << 30
L2_FALLBACK_BYTES = 50 << 20  # H100's L2, where the device does not say
MIN_TIMED_SHARE = 0.25  # of the budget, left to the timed calls however long torch.compile took

_copy_cache: dict[tuple[int, int], float] = {}
_copy_lock = threading.Lock()


# --- the roofline -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Roofline:
    """The least time a kernel can take: `ms = max(compute_ms, memory_ms)`; `bound` names the larger ("memory" on a
    tie, and where there is no work at all)."""

    ms: float
    bound: Literal["memory", "compute"]
    compute_ms: float
    memory_ms: float


def roofline_ms(flops: float, nbytes: float, peak_tflops: float, copy_gbps: float) -> Roofline:
    """flops at `peak_tflops` (TFLOP/s) against `nbytes` moved (read plus written) at `copy_gbps` (GB/s, as
    `copy_bandwidth` measures it). Raises ValueError for negative work or a rate that is not positive."""
    if flops < 0 or nbytes < 0:
        raise ValueError(f"work must not be negative (flops={flops}, bytes={nbytes})")
    if not peak_tflops > 0 or not copy_gbps > 0:
        raise ValueError(f"rates must be positive (peak_tflops={peak_tflops}, copy_gbps={copy_gbps})")
    compute_ms = flops / (peak_tflops * 1e12) * 1e3
    memory_ms = nbytes / (copy_gbps * 1e9) * 1e3
    bound: Literal["memory", "compute"] = "compute" if compute_ms > memory_ms else "memory"
    return Roofline(max(compute_ms, memory_ms), bound, compute_ms, memory_ms)


# --- copy bandwidth ---------------------------------------------------------------------------------------------


def copy_bandwidth(device: int = 0, *, nbytes: int = COPY_BYTES, budget_s: float = 0.5) -> float:
    """Device-to-device copy bandwidth of CUDA device `device` in GB/s, counting the bytes read and the bytes
    written (2 * nbytes per copy, so it compares with a kernel's bytes moved). Measured on the first call and cached
    for the process. Raises ImportError without cupy and cupy's CUDA errors without a device."""
    key = (device, nbytes)
    with _copy_lock:
        if key not in _copy_cache:
            _copy_cache[key] = _measure_copy(device, nbytes, budget_s)
        return _copy_cache[key]


def _measure_copy(device: int, nbytes: int, budget_s: float) -> float:
    import cupy

    runtime = cupy.cuda.runtime
    with cupy.cuda.Device(device):
        # Plain allocations, outside cupy's pool: returned to the device when this function returns.
        src, dst = cupy.cuda.memory.Memory(nbytes), cupy.cuda.memory.Memory(nbytes)
        stream = cupy.cuda.Stream(non_blocking=True)
        runtime.memsetAsync(src.ptr, 1, nbytes, stream.ptr)
        runtime.memsetAsync(dst.ptr, 0, nbytes, stream.ptr)

        def timed(chunk: Chunk) -> list[float]:
            pairs = []
            for _ in range(chunk.reps):
                start, end = cupy.cuda.Event(), cupy.cuda.Event()
                start.record(stream)
                runtime.memcpyAsync(dst.ptr, src.ptr, nbytes, runtime.memcpyDeviceToDevice, stream.ptr)
                end.record(stream)
                pairs.append((start, end))
            stream.synchronize()
            return [cupy.cuda.get_elapsed_time(s, e) for s, e in pairs]

        summary = measure(timed, budget_s=budget_s, min_reps=5, max_reps=200, flops=0.0, min_bytes=2.0 * nbytes)
    return float(summary["gbps"])


# --- PyTorch ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class YardstickTiming:
    """One library's time on the problem. `available=False` carries `why` (and no times); `cv` is the spread
    (standard deviation over mean of the timed calls); `compile_s` is torch.compile's first call (the compilation);
    `cold_cache` says whether L2 was flushed before every timed call (on a CUDA device; not on the CPU)."""

    library: str  # "torch eager" or "torch.compile"
    version: str | None  # torch's
    available: bool
    why: str | None = None
    median_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    cv: float | None = None
    reps: int = 0
    compile_s: float | None = None
    device: str | None = None
    cold_cache: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def time_torch(fn: Callable[..., Any], inputs: Sequence[Any], *, compile: bool, budget_s: float,
               dtype: str | None = None, min_reps: int = 10, max_reps: int = 1000,
               compile_backend: str | None = None, compile_mode: str | None = None) -> YardstickTiming:
    """Time `fn(*inputs)` with torch, eager or through `torch.compile(fn)` (torch's default backend and mode unless
    `compile_backend` / `compile_mode` say otherwise). Never raises.

    `inputs`: device arrays of the workspace (cupy; anything with `__dlpack__`), numpy arrays, torch tensors, or
    plain values passed through. Arrays become torch tensors without a copy; with `dtype="bf16"` 16-bit integer
    storage (how the workspace keeps bf16) is viewed as torch.bfloat16. The first call is the compilation for
    torch.compile and is timed as `compile_s`; the timed part then gets what is left of `budget_s`, but at least a
    quarter of it (and `measure`'s floor of three calls), so a slow compilation shortens the timing rather than
    stretching the job. A compilation that never returns is the worker deadline's to stop (the job's timeout)."""
    library = "torch.compile" if compile else "torch eager"
    try:
        import torch
    except Exception as exc:  # ImportError, or a broken installation
        return YardstickTiming(library, None, False, why=f"torch cannot be imported: {_short(exc)}")
    version = str(torch.__version__)

    def unavailable(why: str, **extra: Any) -> YardstickTiming:
        return YardstickTiming(library, version, False, why=why, **extra)

    try:
        args = [_as_torch(torch, x, dtype) for x in inputs]
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        device = tensors[0].device if tensors else torch.device("cpu")
    except Exception as exc:
        return unavailable(f"the inputs cannot be shared with torch: {_short(exc)}")
    call = fn
    if compile:
        if not hasattr(torch, "compile"):
            return unavailable(f"torch {version} has no torch.compile")
        options = {k: v for k, v in (("backend", compile_backend), ("mode", compile_mode)) if v is not None}
        try:
            call = torch.compile(fn, **options)
        except Exception as exc:
            return unavailable(f"torch.compile refused the function: {_short(exc)}")
    started = time.monotonic()
    compile_s = None
    try:
        with torch.no_grad():
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # inputs written on another stream (cupy's) are complete
            call(*args)  # for torch.compile: the compilation
            _synchronize(torch, device)
            first_s = time.monotonic() - started
            compile_s = first_s if compile else None
            timer = _cuda_timer(torch, call, args, device) if device.type == "cuda" else \
                _cpu_timer(call, args)
            timed_s = max(budget_s * MIN_TIMED_SHARE, budget_s - first_s) if compile else budget_s
            summary = measure(timer, budget_s=timed_s, min_reps=min_reps, max_reps=max_reps, flops=0.0)
    except Exception as exc:
        stage = "compiling or running" if compile and compile_s is None else "running"
        return unavailable(f"{library} failed {stage} the function: {_short(exc)}", compile_s=compile_s,
                           device=str(device))
    return YardstickTiming(library, version, True, median_ms=summary["median_ms"], min_ms=summary["min_ms"],
                           max_ms=summary["max_ms"], cv=summary["cv"], reps=summary["reps"], compile_s=compile_s,
                           device=str(device), cold_cache=device.type == "cuda")


def _as_torch(torch: Any, x: Any, dtype: str | None) -> Any:
    import numpy as np

    if dtype == "bf16" and getattr(x, "dtype", None) == np.uint16 and hasattr(x, "view"):
        x = x.view(np.int16)  # the same bits; DLPack and every torch version know int16
    if isinstance(x, torch.Tensor):
        tensor = x
    elif isinstance(x, np.ndarray):
        tensor = torch.from_numpy(x)
    elif hasattr(x, "__dlpack__"):
        tensor = torch.from_dlpack(x)
    else:
        return x
    if dtype == "bf16" and tensor.dtype == torch.int16:
        tensor = tensor.view(torch.bfloat16)
    return tensor


def _synchronize(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _cuda_timer(torch: Any, call: Callable[..., Any], args: list[Any], device: Any) -> Callable[[Chunk], list[float]]:
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or L2_FALLBACK_BYTES
    cold = ColdL2(torch, l2, device)  # as the kernels are timed
    stream = torch.cuda.current_stream(device)

    def timed(chunk: Chunk) -> list[float]:
        pairs = []
        for rep in range(chunk.reps):
            cold.flush(chunk.offset + rep)  # evicts the inputs and the last call's outputs from L2
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            call(*args)
            end.record(stream)
            pairs.append((start, end))
        stream.synchronize()
        return [s.elapsed_time(e) for s, e in pairs]

    return timed


def _cpu_timer(call: Callable[..., Any], args: list[Any]) -> Callable[[Chunk], list[float]]:
    def timed(chunk: Chunk) -> list[float]:
        times = []
        for _ in range(chunk.reps):
            started = time.perf_counter()
            call(*args)
            times.append((time.perf_counter() - started) * 1e3)
        return times

    return timed


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:400]}" if text else type(exc).__name__
