"""compute-sanitizer (memcheck, racecheck, initcheck, synccheck) over one launch of a CUDA kernel at a small size.

The validator's guards see accesses that land near a buffer; the sanitizer sees every access outside any
allocation, races on shared memory, reads of memory nothing wrote and barrier misuse. Each tool runs the kernel
once in a child process (`target` below) with exact cudaMalloc allocations (no pool, so a few bytes past a buffer
are outside every allocation) and an output left uninitialized (so a kernel that reads C before writing it is
seen). The tools run in parallel; the report keeps only the sanitizer's own lines about the kernel: no host
frames or paths.

Half of a run's seconds are the tool's and Python's start, the target's imports and its CUDA context (1-2 s of
about 2 s per matmul on an H200), none of it the kernel's. So when a run ends, the worker starts the next run's
targets on standby: each has imported what it needs and created its context, and waits on stdin for a job file.
Every target still takes one job and exits: nothing of one kernel's process carries over to the next. Standby
targets start when a run ends (nothing of the session is timed then) and hold an idle context until the next one;
the setting `sanitizer_standby` (PEAK_MCP_SANITIZER_STANDBY=0) turns them off.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from peak_mcp.backends.toolkit import find_tool, kill_tree, sanitizer_missing
from peak_mcp.confine.isolated import python_command, safe_cwd
from peak_mcp.evaluation.phases import SanitizerFinding, SanitizerReport, UncheckedTool
from peak_mcp.runner.messages import LaunchTarget
from peak_mcp.runner.target_inputs import load_inputs, with_inputs

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
ERROR_EXIT = 86
TIMEOUT_S = 180.0
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")
_KEEP = re.compile(r"(Invalid|out of bounds|Race|race|Barrier|barrier|Uninitialized|uninitialized|Misaligned|"
                   r"Error|error|kernel\.(cu|hip):|thread \(|block \(|Address|hazard|Hazard)")
_ADDRESS = re.compile(r"0x[0-9a-f]{6,}")


class _ToolRun(NamedTuple):
    errors: int
    ran: bool
    message: str


def run(job: LaunchTarget, progress: Callable[[str], None] | None = None,
        tools: tuple[str, ...] = TOOLS) -> SanitizerReport:
    """Run every tool on one launch of the job's kernel at once; never raises."""
    started = start(job, tools)
    return started if isinstance(started, SanitizerReport) else started.finish(progress)


def start(job: LaunchTarget, tools: tuple[str, ...] = TOOLS, module: bytes | None = None,
          standby: bool = True) -> Running | SanitizerReport:
    """The tools started on one launch of the job's kernel, to be finished later (the worker checks generality's
    sizes meanwhile: neither is timed); the report at once where compute-sanitizer is missing. `module`: the
    worker's compiled cubin of the same source, which the targets load instead of compiling it again. Targets on
    standby for this device, backend and these tools take the job where there are any; `standby`: whether targets
    for the next job start when this one ends (off: none are used either).

    The tools stay in the worker's process group, so a worker killed as hung takes them along."""
    path = find_tool("compute-sanitizer")
    if path is None:
        return SanitizerReport(available=False, **sanitizer_missing())
    if not standby:  # off: no targets ahead, nor any a run left waiting before the setting changed
        Standby.discard()
    waiting = Standby.take(path, tools, job.device, job.backend) if standby else None
    if waiting is not None:
        try:
            return Running(path, job, tools, module, waiting, standby_next=standby)
        except OSError:  # a target died after take() (a broken pipe): none of the set waits on; a fresh start
            waiting.abort()
    return Running(path, job, tools, module, standby_next=standby)


class Standby:
    """One target per tool, started ahead of the next job: imported, its context created, waiting on stdin for the
    path of a job file in `workdir`. At most one set per worker process (a worker serves one device)."""

    waiting: Standby | None = None

    def __init__(self, path: str, tools: tuple[str, ...], device: int, backend: str) -> None:
        self.key = (path, tools, device, backend)
        self.workdir = tempfile.mkdtemp(prefix="peak-sanitize-", dir=safe_cwd())
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        try:
            for tool in tools:
                self.procs[tool] = _start(path, tool, None, self.workdir, standby=(device, backend))
        except BaseException:
            self.abort()
            raise

    @classmethod
    def prepare(cls, path: str, tools: tuple[str, ...], device: int, backend: str) -> None:
        """Targets for the next job on this device and backend, unless some already wait; never raises."""
        if device < 0:
            return
        if cls.waiting is not None and cls.waiting.key == (path, tools, device, backend) and cls.waiting.alive():
            return
        cls.discard()
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            cls.waiting = Standby(path, tools, device, backend)

    @classmethod
    def take(cls, path: str, tools: tuple[str, ...], device: int, backend: str) -> Standby | None:
        """The waiting set if it fits this run and every target in it is alive; otherwise None (and it is ended)."""
        waiting, cls.waiting = cls.waiting, None
        if waiting is not None and waiting.key == (path, tools, device, backend) and waiting.alive():
            return waiting
        if waiting is not None:
            waiting.abort()
        return None

    @classmethod
    def discard(cls) -> None:
        waiting, cls.waiting = cls.waiting, None
        if waiting is not None:
            waiting.abort()

    def alive(self) -> bool:
        return bool(self.procs) and all(proc.poll() is None for proc in self.procs.values())

    def hand(self, job_file: Path) -> dict[str, subprocess.Popen[bytes]]:
        """Give every target the job (its path on stdin, then EOF): they start at once."""
        for proc in self.procs.values():
            assert proc.stdin is not None
            proc.stdin.write(f"{job_file}\n".encode())
            proc.stdin.close()
        return self.procs

    def abort(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                kill_tree(proc.pid)
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):  # never raises: take() and prepare() call it
                proc.wait(timeout=5)
        shutil.rmtree(self.workdir, ignore_errors=True)


class Running:
    """compute-sanitizer's tools at work on one launch: finish() waits for them, abort() ends them."""

    def __init__(self, path: str, job: LaunchTarget, tools: tuple[str, ...], module: bytes | None = None,
                 standby: Standby | None = None, standby_next: bool = True) -> None:
        self.path, self.job, self.tools, self.standby_next = path, job, tools, standby_next
        self.started = time.perf_counter()
        self.warm = standby is not None
        self.workdir = standby.workdir if standby else tempfile.mkdtemp(prefix="peak-sanitize-", dir=safe_cwd())
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        try:
            job_file = Path(self.workdir, "job.json")
            if module is not None:
                Path(self.workdir, "module.cubin").write_bytes(module)
                job = job.model_copy(update={"module_file": str(Path(self.workdir, "module.cubin"))})
            job_file.write_text(with_inputs(job, self.workdir).model_dump_json())
            if standby:
                self.running = standby.procs
                standby.hand(job_file)
            else:
                self.running = {tool: _start(path, tool, job_file, self.workdir) for tool in tools}
        except BaseException:
            self.running = {}
            self.abort()
            raise

    def finish(self, progress: Callable[[str], None] | None = None) -> SanitizerReport:
        """Wait for every tool (a heartbeat every two seconds keeps the worker's hang detector from taking a slow
        sanitizer for a hung kernel); never raises."""
        where = " ".join(f"{k}={v}" for k, v in self.job.sizes.items())
        results: dict[str, _ToolRun] = {}
        beat = 0.0
        try:
            while len(results) < len(self.tools):
                for tool, proc in self.running.items():
                    if tool in results:
                        continue
                    if proc.poll() is not None:
                        results[tool] = _result(tool, proc, Path(self.workdir, f"{tool}.log"))
                    elif time.perf_counter() - self.started > TIMEOUT_S:
                        kill_tree(proc.pid)
                        results[tool] = _ToolRun(0, False, f"{tool} did not finish within {TIMEOUT_S:.0f} s")
                if progress and time.perf_counter() - beat > 2.0:
                    beat = time.perf_counter()
                    progress(f"compute-sanitizer at {where}: {len(results)} of {len(self.tools)} tools done")
                time.sleep(0.05)
        finally:
            self.abort()
        # For the next job, now that this one is done with the device; not after a tool that hung or could not start
        if self.standby_next and all(r.ran for r in results.values()):
            Standby.prepare(self.path, self.tools, self.job.device, self.job.backend)
        return _report(self.job, results, self.started)

    def abort(self) -> None:
        """End whatever still runs and remove the working folder (idempotent)."""
        for proc in self.running.values():
            if proc.poll() is None:
                kill_tree(proc.pid)
        shutil.rmtree(self.workdir, ignore_errors=True)


def _report(job: LaunchTarget, results: dict[str, _ToolRun], started: float) -> SanitizerReport:
    # Lean for the agent: clean tools by name; only a failing or unchecked tool says more.
    failures = [SanitizerFinding(check=f"sanitizer_{tool}", message=r.message) for tool, r in results.items()
                if r.errors]
    unchecked = [UncheckedTool(tool=tool, message=r.message) for tool, r in results.items() if not r.ran]
    clean = [tool for tool, r in results.items() if r.ran and not r.errors]
    return SanitizerReport(available=True, passed=not failures, sizes=job.sizes, clean=clean, failures=failures,
                           unchecked=unchecked, seconds=round(time.perf_counter() - started, 3))


def _start(sanitizer: str, tool: str, job_file: Path | None, workdir: str,
           standby: tuple[int, str] | None = None) -> subprocess.Popen[bytes]:
    """One tool on one target: on `job_file`, or (job_file None) on standby for a (device, backend), reading the job
    file's path from stdin."""
    command = [sanitizer, "--tool", tool, "--error-exitcode", str(ERROR_EXIT), "--print-limit", "8",
               "--show-backtrace", "device", "--log-file", str(Path(workdir, f"{tool}.log"))]
    if tool == "memcheck":
        command += ["--leak-check", "no"]
    target_args = [str(job_file)] if job_file is not None else ["--standby", *map(str, standby or (0, "cuda"))]
    command += python_command(sys.executable, "peak_mcp.runner.sanitizer", *target_args)
    return subprocess.Popen(command, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            stdin=subprocess.PIPE if job_file is None else subprocess.DEVNULL)


def _result(tool: str, proc: subprocess.Popen[bytes], log_file: Path) -> _ToolRun:
    text = log_file.read_text(errors="replace") if log_file.exists() else ""
    summary = _SUMMARY.search(text)
    errors = int(summary.group(1)) if summary else (1 if proc.returncode == ERROR_EXIT else 0)
    if proc.returncode not in (0, ERROR_EXIT) and not summary:
        stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        tail = stderr.strip().splitlines()[-1:] or ["no output"]
        return _ToolRun(0, False, f"{tool} could not run the kernel: {tail[0][:200]}")
    return _ToolRun(errors, True, _first_report(text, tool) if errors else "clean")


def _first_report(text: str, tool: str) -> str:
    """The first error block, sanitizer lines only, addresses masked."""
    lines = [line.removeprefix("=========").strip() for line in text.splitlines() if line.startswith("=========")]
    block: list[str] = []
    for line in lines:
        if not line or line.startswith(("COMPUTE-SANITIZER", "ERROR SUMMARY")):
            if block:
                break
            continue
        if _KEEP.search(line) and "Host Frame" not in line and "/" not in re.sub(r"kernel\.(cu|hip)", "", line):
            block.append(_ADDRESS.sub("0x…", line))
        if len(block) >= 6:
            break
    return f"compute-sanitizer {tool}: " + (" | ".join(block) if block else "reported an error")


_READY: dict[tuple[str, int], Any] = {}  # in a standby target: the executor it opened before its job came


def _executor(backend: str, device: int) -> Any:
    from peak_mcp.backends.cuda import CudaExecutor
    from peak_mcp.backends.hip import HipOnCudaExecutor

    return (HipOnCudaExecutor if backend == "hip" else CudaExecutor)(device, flush=False)


def _prepare(device: int, backend: str) -> None:
    """What a standby target does before it knows its job, in the order a fresh target does it: the allocator, the
    imports, the executor (its context). Opening the context another way first (through CuPy's runtime) made
    memcheck report a failed cuGetProcAddress in every later run, clean kernels included (H200)."""
    import cupy

    cupy.cuda.set_allocator(None)  # every buffer its own cudaMalloc: the sanitizer knows each one's bounds
    import peak_mcp.backends.tensor_maps
    import peak_mcp.problems.shipped  # noqa: F401

    _READY[(backend, device)] = _executor(backend, device)


def target(job_file: str) -> int:
    """Inside compute-sanitizer: compile, allocate exactly, load inputs, launch once."""
    import cupy

    cupy.cuda.set_allocator(None)  # every buffer its own cudaMalloc: the sanitizer knows each one's bounds
    from peak_mcp.backends.base import Compiled
    from peak_mcp.backends.tensor_maps import launch_geometry
    from peak_mcp.core.dtypes import itemsize
    from peak_mcp.core.launch import with_params
    from peak_mcp.problems.base import BufferArg, ScalarArg
    from peak_mcp.problems.shipped import worker_problem

    job = LaunchTarget.model_validate_json(Path(job_file).read_text())
    problem, dtype, sizes = worker_problem(job.problem, job.declaration), job.dtype, job.sizes
    executor = _READY.pop((job.backend, job.device), None) or _executor(job.backend, job.device)
    spec = job.spec
    if job.module_file:  # the worker's module of this source: checked there, compiled once
        cubin = Path(job.module_file).read_bytes()
        kernel = executor.load(Compiled(handle=None, spec=spec, binary=cubin, pending=cubin))
    else:
        kernel = executor.compile(with_params(job.source, spec.config()), spec)
    inputs = load_inputs(job)  # made by the worker: no problem code here, no cupy kernels under the sanitizer
    args = problem.arguments(dtype)
    buffers = []
    for arg in (a for a in args if isinstance(a, BufferArg)):
        buf = executor.alloc(arg.count(sizes) * itemsize(arg.dtype))
        if not arg.is_output:  # outputs stay uninitialized for initcheck
            executor.write(buf, inputs[arg.name].view(np.uint8))
        buffers.append(buf)
    scalars = [a.value(sizes) for a in args if isinstance(a, ScalarArg)]
    executor.run(kernel, [executor.pointer(b, 0) for b in buffers], scalars,
                 launch_geometry(spec, problem, dtype, sizes))
    return 0


def main() -> int:
    if sys.argv[1] == "--standby":  # wait, ready, for one job file's path on stdin; EOF alone: nothing to do
        _prepare(int(sys.argv[2]), sys.argv[3])
        job_file = sys.stdin.readline().strip()
        return target(job_file) if job_file else 0
    return target(sys.argv[1])


if __name__ == "__main__":
    sys.exit(main())
