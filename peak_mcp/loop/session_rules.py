"""What a kernel must know beyond the ABI to pass in one session, said once with the session: what "correct" means
(the tolerance), what the launch line may say, how wide its index arithmetic must be at these sizes, what the
compiler offers, and what a session without a device does. An agent working over MCP alone has nothing else to go by:
each line here answers a question an agent had to guess at (or learn from a failed submission)."""

from __future__ import annotations

from collections.abc import Mapping

from peak_mcp.core.devices import Device
from peak_mcp.core.dtypes import is_exact, itemsize
from peak_mcp.core.expressions import SM_COUNT
from peak_mcp.evaluation.profiling.occupancy import shared_optin_bytes
from peak_mcp.problems.base import BufferArg, Problem

INT_LIMIT = 2**31  # an int index (or a product of two) overflows here


def session_rules(problem: Problem, backend: str, dtype: str, sizes: Mapping[str, int], device: Device,
                  runs: bool) -> str:
    """The rules as lines of Markdown; `runs`: the session has a device that runs its kernels."""
    lines = [_correctness(problem, dtype, sizes), _launch_line(problem, backend, device)]
    wide = _wide_buffers(problem, dtype, sizes)
    if wide:
        lines.append(f"Index width: at these sizes {wide}; use 64-bit index arithmetic (size_t, or (long long)row * "
                     "COLS): an int element index, byte offset or product of two sizes overflows past 2^31 - 1.")
    if backend == "cuda":
        lines.append("Compiler: NVRTC, C++17, one file; the CUDA toolkit's device headers (cuda_fp16.h, cuda_bf16.h, "
                     "mma.h, math_constants.h, cuda_pipeline.h) and CCCL's (cub/block/*.cuh, cub/warp/*.cuh, "
                     "cuda/barrier, cuda/pipeline, cuda/std/cmath, cooperative_groups.h); no host C or C++ "
                     "library (<cmath>, <cstdio>; printf is built in): INFINITY is CUDART_INF_F (math_constants.h).")
    if not runs:
        lines.append("No device here: a submission is compiled and its launch checked against the limits every "
                     "device has (grid, block, cluster; shared against the target's); it is not run, validated or "
                     "timed, so nothing here says it is correct.")
    return "\n".join(f"- {line}" for line in lines)


def _correctness(problem: Problem, dtype: str, sizes: Mapping[str, int]) -> str:
    tolerance = problem.tolerance(dtype, dict(sizes))
    exact = [a.name for a in problem.arguments(dtype) if isinstance(a, BufferArg) and a.is_output
             and is_exact(a.dtype)]
    said = (f"Correct means: every float output within {tolerance.summary()}"
            + (f"; {', '.join(exact)} equal to the reference in every element" if exact else "")
            + ". Each submission is checked on fresh random inputs (and a stress draw where the problem has one), "
            + ("at other sizes, " if problem.symbols else "")
            + "on repeated launches and under the sanitizer where the device has one.")
    return said


def _launch_line(problem: Problem, backend: str, device: Device) -> str:
    symbols = ", ".join(problem.symbols)
    grammar = (f"integer literals, the size symbols ({symbols}), {SM_COUNT} (the device's multiprocessors), "
               "+ - * // %, cdiv(a, b), min, max")
    if backend == "hlsl":
        return f"Launch line: groups=(x, y, z) takes expressions of {grammar}; [numthreads] is in the source."
    line = f"Launch line: grid=, block= and shared= (dynamic bytes) take expressions of {grammar}"
    if backend != "cuda":
        return line + "."
    optin = shared_optin_bytes(device)
    return line + ("; over 48 KB of shared the server opts the kernel in" +
                   (f", up to {optin // 1024} KB a block on this target." if optin else "."))


def _wide_buffers(problem: Problem, dtype: str, sizes: Mapping[str, int]) -> str:
    wide = []
    for arg in problem.arguments(dtype):
        if not isinstance(arg, BufferArg):
            continue
        count = arg.count(dict(sizes))
        nbytes = count * itemsize(arg.dtype)
        if nbytes >= INT_LIMIT:
            wide.append(f"{arg.name} holds {count:,} elements ({nbytes / 1e9:.3g} GB)")
    return "; ".join(wide)
