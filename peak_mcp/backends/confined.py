"""Compilers run confined and bounded: what any compile may read, and how much memory and time it may take.

Every compiler process (glslang, dxc, clang for AMD targets, and NVRTC in its child processes) starts under the
same `CompileLimits`: an address-space limit, a CPU-time limit, a wall-clock limit, and the sandbox (Landlock:
the toolchain and runtime trees read-only, its own scratch directory writable). A compile that hits a limit is a
`CompileFailed` with reason `resources` that names the limit, never a hung kernel or a dead worker.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from peak_mcp.backends.base import CompileFailed
from peak_mcp.confine.sandbox import SYSTEM_READ, Policy, confined_command, python_runtime_paths, tool_paths

GIB = 1 << 30


@dataclass(frozen=True)
class CompileLimits:
    memory_bytes: int = 4 * GIB
    cpu_seconds: int = 60
    wall_seconds: float = 120.0
    sandbox: bool = True  # Landlock where the kernel has it; the limits apply either way

    def policy(self, read: list[str], write: list[str]) -> Policy:
        return Policy(read=(*SYSTEM_READ, *read), write=tuple(write), memory_bytes=self.memory_bytes,
                      cpu_seconds=self.cpu_seconds)

    @property
    def memory(self) -> str:
        return f"memory ({self.memory_bytes / GIB:g} GiB)"

    @property
    def cpu(self) -> str:
        return f"CPU time ({self.cpu_seconds} s)"

    @property
    def pulse_s(self) -> float:
        """How long a compile may keep its worker's progress beating: past its own wall limit, it is no compile."""
        return self.wall_seconds + 10

    def describe(self) -> str:
        return (f"{self.memory_bytes / GIB:g} GiB of memory, {self.cpu_seconds} s of CPU, "
                f"{self.wall_seconds:g} s in all")


_limits = CompileLimits()


def limits() -> CompileLimits:
    return _limits


def configure(**changes: object) -> CompileLimits:
    """Set this process's compile limits (a worker does it once, from the server's settings)."""
    global _limits
    _limits = replace(_limits, **changes)  # type: ignore[arg-type]
    return _limits


# What compilers print when an allocation fails under RLIMIT_AS.
OUT_OF_MEMORY = re.compile(r"out of memory|bad_alloc|cannot allocate memory|memoryerror|allocation failed|"
                            r"NVRTC_ERROR_OUT_OF_MEMORY", re.IGNORECASE)


def resources_exceeded(name: str, what: str, source_name: str) -> CompileFailed:
    return CompileFailed(
        f"{source_name}: compile_error: resources: the compiler ({name}) went past its {what} limit and was "
        "stopped; the kernel never ran. Macros or templates that expand without bound, or huge unrolled loops, do "
        "this: simplify the source.", reason="resources")


def exceeded_limit(returncode: int, output: str, limits: CompileLimits) -> str | None:
    """Which limit a finished compiler process ran into, or None. The CPU limit sends SIGXCPU (SIGKILL a second
    later if that is ignored); a failed allocation under the memory limit makes compilers say so and abort."""
    if returncode == -signal.SIGXCPU:
        return limits.cpu
    if returncode != 0 and OUT_OF_MEMORY.search(output):
        return limits.memory
    if returncode == -signal.SIGKILL:
        return f"{limits.cpu} or {limits.memory}"
    return None


def run_compiler(name: str, command: list[str], workdir: str, source_name: str, read: tuple[str, ...] = (),
                 env: dict[str, str] | None = None,
                 wall_seconds: float | None = None) -> subprocess.CompletedProcess[str]:
    """Run one compiler in `workdir` (its only writable place) under this process's limits (`wall_seconds`, where
    given, lowers the wall-clock one); CompileFailed with reason `resources` when it hits one. The caller reads the
    result's output and status."""
    bounds = limits()
    if wall_seconds is not None:
        bounds = replace(bounds, wall_seconds=min(wall_seconds, bounds.wall_seconds))
    tool_root = str(Path(os.path.realpath(command[0])).parent.parent)  # e.g. /opt/dxc for /opt/dxc/bin/dxc
    policy = bounds.policy([tool_root, *read, *python_runtime_paths(), *tool_paths()], [workdir])
    process = subprocess.Popen(confined_command(policy, command, bounds.sandbox), cwd=workdir, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                               start_new_session=True)
    try:
        out, err = process.communicate(timeout=bounds.wall_seconds)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise resources_exceeded(name, f"wall-clock ({bounds.wall_seconds:g} s: it timed out)", source_name) from None
    hit = exceeded_limit(process.returncode, out + err, bounds)
    if hit:
        raise resources_exceeded(name, hit, source_name)
    return subprocess.CompletedProcess(command, process.returncode, out, err)
