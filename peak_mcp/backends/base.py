"""What a backend gives the generic validation and timing code in `peak_mcp.evaluation.steps`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from peak_mcp.core.launch import LaunchSpec

Regions = list[tuple[Any, int]]  # (pointer() result, byte count)


class CompileFailed(Exception):
    """Compilation failed; `log` is the compiler's output with line numbers. `reason` is `resources` when the
    compiler went past a memory or time limit (confined.py), else empty."""

    def __init__(self, log: str, reason: str = "") -> None:
        super().__init__(log)
        self.log = log
        self.reason = reason


class KernelFault(Exception):
    """The kernel left the device unusable: it crashed the context (illegal address, device lost) or never
    finished. The worker must restart. `kind` is what the version records: kernel_fault or timeout."""

    def __init__(self, message: str, kind: str = "kernel_fault") -> None:
        super().__init__(message)
        self.kind = kind


# A vendor library's product checked on sampled rows against float64: a right call is ~1e-6 off (f32
# accumulation); above this the library was called wrongly, and no yardstick beats a wrong one.
WRONG_YARDSTICK = 1e-3


def vendor_matmul_result(library: str, c: Any, a: Any, b: Any, dtype: str, sizes: dict[str, int],
                         summary: dict[str, Any], xp: Any = np) -> dict[str, Any]:
    """A vendor matmul baseline's answer: its timing `summary`, once three rows of its product `c` (f32, M×N) agree
    with float64 from the inputs `a`, `b` (storage dtype; numpy, or cupy on the device); else unavailable."""
    from peak_mcp.core.dtypes import to_float64

    m, n, k = sizes["M"], sizes["N"], sizes["K"]
    rows = xp.asarray([0, m // 2, m - 1])
    ref = to_float64(a, dtype).reshape(m, k)[rows] @ to_float64(b, dtype).reshape(k, n)
    got = c.reshape(m, n)[rows].astype(xp.float64)
    rel = float(xp.linalg.norm(got - ref) / xp.linalg.norm(ref))
    if not rel < WRONG_YARDSTICK:
        return {"available": False, "reason": f"{library} returned a wrong product (relative L2 error {rel:.2g} on "
                                              "three rows): no yardstick rather than a wrong one"}
    return {"available": True, "library": library, "rel_l2_error": rel, **summary}


@dataclass
class Compiled:
    """A compiled kernel: the backend's handle plus what the agent should see about resources."""

    handle: Any
    spec: LaunchSpec
    resources: dict[str, Any] = field(default_factory=dict)  # registers, shared_bytes, local_bytes, spills, ...
    log: str = ""
    binary: bytes | None = None  # the compiled module (a CUDA cubin), for profiling tools
    pending: Any = None  # built but not loaded into the device context yet (Executor.build, then Executor.load)


@dataclass
class DeviceFacts:
    backend: str
    index: int
    name: str
    properties: dict[str, Any] = field(default_factory=dict)  # sm_count, arch, l2_bytes, shared per block, ...


class Executor(ABC):
    """One device of one backend, owned by one worker process.

    Buffer contents cross this interface as uint8 arrays of `xp`: numpy where the device is reached through
    host copies (Vulkan), cupy where buffers live on the device and the validator computes there (CUDA)."""

    backend: str
    facts: DeviceFacts
    xp: Any = np
    sanitizer: bool = False  # compute-sanitizer can watch its launches (the CUDA driver runs them)

    @abstractmethod
    def compile(self, source: str, spec: LaunchSpec) -> Compiled:
        """Compile or raise CompileFailed."""

    def build(self, source: str, spec: LaunchSpec) -> Compiled:
        """Compile without touching the device, so that it may run on a thread beside timed launches (tuning);
        `load` then finishes it on the timing thread. Executors whose compile never stalls a device: compile."""
        return self.compile(source, spec)

    def load(self, kernel: Compiled) -> Compiled:
        """Make a `build` result launchable (CompileFailed if it cannot be)."""
        return kernel

    @abstractmethod
    def alloc(self, nbytes: int) -> Any: ...

    @abstractmethod
    def free(self, buf: Any) -> None: ...

    @abstractmethod
    def write(self, buf: Any, data: Any, offset: int = 0) -> None:
        """Copy bytes (a uint8 array of xp or numpy) into `buf` at byte `offset`."""

    @abstractmethod
    def read(self, buf: Any, nbytes: int, offset: int = 0) -> Any:
        """Copy `nbytes` of `buf` from byte `offset` into a new uint8 array of xp."""

    @abstractmethod
    def pointer(self, buf: Any, offset: int) -> Any:
        """The launch argument for `buf` starting at byte `offset` (a multiple of 256)."""

    @abstractmethod
    def run(self, kernel: Compiled, buffers: list[Any], scalars: list[int], geometry: dict[str, Any]) -> None:
        """Launch once (buffers as given by pointer()) and wait. Raise KernelFault if the device context is lost."""

    @abstractmethod
    def time(self, kernel: Compiled, buffer_sets: list[list[Any]], scalars: list[int], geometry: dict[str, Any],
             reps: int, cold_cache: bool, poison: list[list[Regions]] | None = None,
             after_each: Callable[[int], None] | None = None) -> list[float]:
        """Time `reps` launches, launch i on buffer_sets[i % len(buffer_sets)], each in ms by device timers.
        Before each launch and outside its timed interval: fill poison[i % len] (pointer, nbytes) regions with
        0xFF bytes, so every launch must write its whole output; flush the last-level cache if asked.
        `after_each(i)`, where the backend supports it (device arrays), queues work after launch i."""

    def check_geometry(self, kernel: Compiled, geometry: dict[str, Any]) -> str | None:
        """Return why this launch geometry cannot run on the device, or None."""
        return None

    def baseline(self, yardstick: str, dtype: str, sizes: dict[str, int], inputs: dict[str, np.ndarray],
                 reps_budget_s: float) -> dict[str, Any]:
        """Time the vendor library a problem names as its yardstick (Problem.yardstick: "gemm") on the same inputs;
        {'available': False, 'reason': ...} where this backend has none."""
        return {"available": False, "reason": f"{self.backend} has no vendor library"}

    def close(self) -> None:  # noqa: B027 - optional hook
        pass
