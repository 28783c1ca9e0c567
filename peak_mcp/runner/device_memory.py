"""Device memory a process holds between jobs, given back; and an out-of-memory error said as the server's.

Two processes share a GPU per session (the device worker and the problem host of the session's file), and each keeps
what it freed in a cache of its own: cupy's memory pool, torch's caching allocator. Neither cache is seen by the
other process, so memory one process freed could fail the other's allocation (a 141 GB H200 ran out with each
problem alone well inside it). Each process gives its cached blocks back after every job or call (`release`).
"""

from __future__ import annotations

import contextlib
import gc
import sys

from peak_mcp.core.errors import DeviceMemory

_OOM_NAMES = ("OutOfMemoryError",)  # cupy.cuda.memory.OutOfMemoryError, torch.OutOfMemoryError
_OOM_TEXTS = ("out of memory", "out of device memory",  # torch's and cupy's texts, the Vulkan runtime's
              "CUDA_ERROR_OUT_OF_MEMORY", "cudaErrorMemoryAllocation", "hipErrorOutOfMemory")


def release(collect: bool = True) -> None:
    """Cached device blocks of cupy and torch (where this process loaded them) back to the driver. `collect`:
    first drop the arrays only a reference cycle keeps (a traceback's frames hold a failed job's arrays)."""
    if collect:
        gc.collect()
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        with contextlib.suppress(Exception):
            cupy.get_default_memory_pool().free_all_blocks()
            cupy.get_default_pinned_memory_pool().free_all_blocks()
    torch = sys.modules.get("torch")
    if torch is not None:
        with contextlib.suppress(Exception):
            if torch.cuda.is_initialized():
                torch.cuda.empty_cache()


def is_out_of_memory(exc: BaseException | None) -> bool:
    """`exc`, or an exception it was raised from or during, is a device running out of memory."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if type(exc).__name__ in _OOM_NAMES or any(text in str(exc) for text in _OOM_TEXTS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def free_note() -> str:
    """How much memory the current CUDA device has free now, after `release` (empty where unknown)."""
    release()
    free = total = None
    cupy, torch = sys.modules.get("cupy"), sys.modules.get("torch")
    with contextlib.suppress(Exception):
        if cupy is not None:
            free, total = cupy.cuda.runtime.memGetInfo()
        elif torch is not None and torch.cuda.is_initialized():
            free, total = torch.cuda.mem_get_info()
    if free is None or total is None:
        return ""
    return f"; the device has {free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB now"


def device_memory_error(error: str, where: str, note: str | None = None) -> DeviceMemory:
    """`error` (an out-of-memory error's text) said as the device's, not the kernel's; `note`: free memory as
    measured by the process that ran out (else measured here)."""
    text = error.split("\n")[0][:300]
    return DeviceMemory(
        f"the device ran out of memory in {where}, not because of the kernel: {text}"
        f"{free_note() if note is None else note}. The server gives back what finished jobs held; other sessions' "
        "buffers on the same device count too",
        "submit again; if it repeats, use smaller sizes (or a device with more free memory).")

