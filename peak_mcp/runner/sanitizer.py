"""compute-sanitizer (memcheck, racecheck, initcheck, synccheck) over one launch of a CUDA kernel at a small size.

The validator's guards see accesses that land near a buffer; the sanitizer sees every access outside any
allocation, races on shared memory, reads of memory nothing wrote and barrier misuse. Each tool runs the kernel
once in a child process (`target` below) with exact cudaMalloc allocations (no pool, so a few bytes past a buffer
are outside every allocation) and an output left uninitialized (so a kernel that reads C before writing it is
seen). The tools run in parallel; the report keeps only the sanitizer's own lines about the kernel: no host
frames or paths.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from peak_mcp.runner.isolated import python_command, safe_cwd

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
ERROR_EXIT = 86
TIMEOUT_S = 180.0
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")
_KEEP = re.compile(r"(Invalid|out of bounds|Race|race|Barrier|barrier|Uninitialized|uninitialized|Misaligned|"
                   r"Error|error|kernel\.cu|thread \(|block \(|Address|hazard|Hazard)")
_ADDRESS = re.compile(r"0x[0-9a-f]{6,}")


def find() -> str | None:
    """compute-sanitizer on PATH, under $CUDA_HOME, or in /usr/local/cuda."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and Path(home, "bin", "compute-sanitizer").is_file():
            return str(Path(home, "bin", "compute-sanitizer"))
    return None


def missing_note() -> dict[str, str]:
    return {"what": "compute-sanitizer", "why": "not on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin",
            "fix": "install the CUDA toolkit's sanitizer (e.g. apt-get install cuda-sanitizer-13-0) or put it on "
                   "PATH; without it, accesses far outside a buffer and shared-memory races go unchecked"}


def run(job: dict[str, Any], progress: Any = None, tools: tuple[str, ...] = TOOLS) -> dict[str, Any]:
    """Run every tool on the job (source, spec, problem, dtype, sizes, device); never raises."""
    path = find()
    if path is None:
        return {"available": False, **missing_note()}
    started = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix="peak-sanitize-", dir=safe_cwd())
    job_file = Path(workdir, "job.json")
    job_file.write_text(json.dumps(job))
    if progress:
        progress(f"compute-sanitizer ({', '.join(tools)}) at " + " ".join(f"{k}={v}" for k, v in job["sizes"].items()))
    with ThreadPoolExecutor(len(tools)) as pool:
        results = dict(zip(tools, pool.map(lambda tool: _one(path, tool, job_file, workdir), tools), strict=True))
    shutil.rmtree(workdir, ignore_errors=True)
    failures = [{"check": f"sanitizer_{tool}", "message": r["message"]} for tool, r in results.items()
                if r.get("errors")]
    return {"available": True, "passed": not failures, "sizes": job["sizes"], "tools": results,
            "failures": failures, "seconds": round(time.perf_counter() - started, 3)}


def _one(sanitizer: str, tool: str, job_file: Path, workdir: str) -> dict[str, Any]:
    log_file = Path(workdir, f"{tool}.log")
    command = [sanitizer, "--tool", tool, "--error-exitcode", str(ERROR_EXIT), "--print-limit", "8",
               "--show-backtrace", "device", "--log-file", str(log_file)]
    if tool == "memcheck":
        command += ["--leak-check", "no"]
    command += python_command(sys.executable, "peak_mcp.runner.sanitizer", str(job_file))
    try:
        done = subprocess.run(command, cwd=workdir, capture_output=True, timeout=TIMEOUT_S, check=False,
                              start_new_session=True)
    except subprocess.TimeoutExpired:
        return {"errors": 0, "ran": False, "message": f"{tool} did not finish within {TIMEOUT_S:.0f} s"}
    text = log_file.read_text(errors="replace") if log_file.exists() else ""
    summary = _SUMMARY.search(text)
    errors = int(summary.group(1)) if summary else (1 if done.returncode == ERROR_EXIT else 0)
    if done.returncode not in (0, ERROR_EXIT) and not summary:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        return {"errors": 0, "ran": False, "message": f"{tool} could not run the kernel: {tail[0][:200]}"}
    return {"errors": errors, "ran": True, "message": _first_report(text, tool) if errors else "clean"}


def _first_report(text: str, tool: str) -> str:
    """The first error block, sanitizer lines only, addresses masked."""
    lines = [line.removeprefix("=========").strip() for line in text.splitlines() if line.startswith("=========")]
    block: list[str] = []
    for line in lines:
        if not line or line.startswith(("COMPUTE-SANITIZER", "ERROR SUMMARY")):
            if block:
                break
            continue
        if _KEEP.search(line) and "Host Frame" not in line and "/" not in line.replace("kernel.cu", ""):
            block.append(_ADDRESS.sub("0x…", line))
        if len(block) >= 6:
            break
    return f"compute-sanitizer {tool}: " + (" | ".join(block) if block else "reported an error")


def target(job_file: str) -> int:
    """Inside compute-sanitizer: compile, allocate exactly, load inputs, launch once."""
    import cupy

    cupy.cuda.set_allocator(None)  # every buffer its own cudaMalloc: the sanitizer knows each one's bounds
    from peak_mcp.backends.cuda import CudaExecutor
    from peak_mcp.dtypes import itemsize
    from peak_mcp.launch import LaunchSpec
    from peak_mcp.problems import get_problem
    from peak_mcp.problems.base import BufferArg, ScalarArg

    job = json.loads(Path(job_file).read_text())
    problem, dtype, sizes = get_problem(job["problem"]), job["dtype"], {k: int(v) for k, v in job["sizes"].items()}
    executor = CudaExecutor(int(job["device"]), flush=False)
    spec = LaunchSpec.model_validate(job["spec"])
    kernel = executor.compile(job["source"], spec)
    inputs = problem.make_inputs(sizes, dtype, 0, np)  # on the host: no cupy kernels under the sanitizer
    args = problem.arguments(dtype)
    buffers = []
    for arg in (a for a in args if isinstance(a, BufferArg)):
        buf = executor.alloc(arg.count(sizes) * itemsize(arg.dtype))
        if not arg.is_output:  # outputs stay uninitialized for initcheck
            executor.write(buf, inputs[arg.name].view(np.uint8))
        buffers.append(buf)
    scalars = [a.value(sizes) for a in args if isinstance(a, ScalarArg)]
    executor.run(kernel, [executor.pointer(b, 0) for b in buffers], scalars, spec.evaluate(sizes))
    return 0


def main() -> int:
    return target(sys.argv[1])


if __name__ == "__main__":
    sys.exit(main())
