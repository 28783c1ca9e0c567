"""A worker's first job for a (problem, dtype): prepare the checks before the agent's kernel runs.

The pool stops a job that sends no progress for PEAK_MCP_JOB_TIMEOUT seconds, taking it for a hung kernel. Where
the validator computes on the device (cupy), the first validation in a fresh process pays one-time costs that are
no kernel's doing: cupy compiles each of its elementwise kernels on a cold cache, the BLAS library loads for the
float64 reference. On a fresh H100 host they took longer than 8 s, and a correct naive kernel was reported as
hung. So a worker first runs the problem's own naive kernel through validation and a short benchmark at small
sizes, under a heartbeat: our kernel cannot hang, and the agent's kernel then meets warm caches.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np

from peak_mcp.backends.base import Executor, KernelFault
from peak_mcp.backends.registry import launch_spec
from peak_mcp.core.errors import PeakError
from peak_mcp.evaluation.steps import array_module
from peak_mcp.problems.shipped import worker_problem
from peak_mcp.runner.heartbeat import heartbeat
from peak_mcp.runner.jobs import evaluate
from peak_mcp.runner.messages import EvaluateJob, Job

PRIME_SIZE = 64  # every size symbol; small enough to cost milliseconds once caches are warm
PRIME_LIMIT_S = 120.0  # beats stop after this: a device wedged before any kernel of the agent's ran is still caught

Progress = Callable[[str], None]


class Primer:
    """Remembers what this worker has prepared; `prime` is a no-op after the first call for a (problem, dtype)."""

    def __init__(self, executor: Executor, backend: str) -> None:
        self.executor, self.backend = executor, backend
        self.done: set[tuple[str, str]] = set()
        # A host validator (numpy) compiles nothing on first use; a compile-only worker validates nothing. Vulkan
        # buffers with cupy beside them prepare like CUDA's. Choosing (importing cupy, a CUDA context, a first
        # kernel compile) takes seconds: here, before the worker says it is ready, not inside a job's time.
        self.on_gpu = executor.facts.index >= 0 and array_module(executor).xp is not np

    def needed(self, job: Job) -> bool:
        return self.on_gpu and (job.problem, job.dtype) not in self.done

    def prime(self, job: Job, progress: Progress) -> None:
        if not self.needed(job):
            return
        self.done.add((job.problem, job.dtype))  # once, even if it fails: the job itself then shows why
        with heartbeat(progress, f"preparing the checks for {job.problem} {job.dtype} (once per worker)",
                       limit_s=PRIME_LIMIT_S):
            try:
                result = evaluate(self.executor, self._warmup(job), lambda _: None)
            except KernelFault as fault:  # the context is gone: the worker must restart, whatever job it was
                raise KernelFault(f"the device failed while peak-mcp prepared its checks, before your kernel ran: "
                                  f"{fault}", fault.kind) from None
            except Exception as exc:  # the agent's job runs anyway, and meets the same cause if it is real
                print(f"peak-mcp worker: preparing the checks failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                return
        if result.validation is None or not result.validation.passed:
            print(f"peak-mcp worker: the naive {job.problem} {job.dtype} kernel did not validate while preparing "
                  f"the checks: {result.compile or result.validation}", file=sys.stderr)

    def _warmup(self, job: Job) -> EvaluateJob:
        """The problem's naive kernel at PRIME_SIZE, validated on both input sets and timed over two rotations."""
        problem = worker_problem(job.problem, job.declaration)
        source = problem.naive_kernel(self.backend, job.dtype)
        spec = launch_spec(source, self.backend, problem.symbols, problem.derived).on_device(
            self.executor.facts.properties.get("sm_count"))  # a defined problem's naive kernel may be persistent
        sizes = dict.fromkeys(problem.symbols, PRIME_SIZE)
        try:
            sizes = problem.check_sizes(sizes)
        except PeakError:  # a problem's own constraints: its defaults meet them
            sizes = dict(problem.default_sizes)
        return EvaluateJob(problem=job.problem, declaration=job.declaration, dtype=job.dtype, sizes=sizes,
                           source=source, spec=spec, steps=["compile", "validate", "benchmark"], trials=2,
                           time_budget_s=0.01, min_reps=4, max_reps=8)
