"""The worker's `tune` job: compile a batch of configurations of one kernel in parallel, prune the invalid ones with
a reason, validate the rest cheaply (one trial) and time them on a short budget.

Builds run on threads (`Executor.build`: NVRTC, the HLSL compiler subprocess and Vulkan pipeline creation release
the GIL) and each configuration is validated and timed on this thread as soon as it is built, while the rest still
build: about twice the configurations per minute. What could disturb a timed launch stays off the threads: a CUDA
module is loaded into the context (`Executor.load`, which may synchronize it) here, between timed launches, never
beside one. The fastest configuration of a tune is validated and timed again in full afterwards, with nothing else
running.

Progress lines start with `config i/n` (1-based, i its position in job['configs']) while configuration i runs, so a
job that dies (a kernel fault ends the worker) names the configuration that killed it: tuning.crashed_config.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Any

from peak_mcp.backends import confined
from peak_mcp.backends.base import Compiled, CompileFailed, Executor, KernelFault
from peak_mcp.backends.tensor_maps import launch_geometry
from peak_mcp.core.errors import AnnotationError, PeakError
from peak_mcp.core.launch import LaunchSpec, with_params
from peak_mcp.evaluation.configs import ConfigResult, Kind, Status
from peak_mcp.evaluation.steps import benchmark, validate
from peak_mcp.problems.base import Problem
from peak_mcp.runner.heartbeat import HEARTBEAT_S, heartbeat
from peak_mcp.runner.jobs import job_problem
from peak_mcp.runner.messages import TuneJob
from peak_mcp.runner.replies import TuneResult

Progress = Callable[[str], None]
MAX_REASON_CHARS = 1500
# Compile failures that are the device's limits rather than the source's errors (HLSL reflection, ptxas).
_RESOURCES = re.compile(r"device limit|over the device|which .* lacks|too much shared data|too many resources|"
                        r"uses too many registers", re.IGNORECASE)


def _result(params: dict[str, int], status: Status, kind: Kind | None = None, reason: str | None = None,
            **timing: Any) -> ConfigResult:
    if reason and len(reason) > MAX_REASON_CHARS:
        reason = reason[:MAX_REASON_CHARS] + " [...]"
    return ConfigResult(params=params, status=status, kind=kind, reason=reason, **timing)


def _current_device(executor: Executor) -> None:
    """CUDA contexts are current per thread: a compile thread must see the worker's device (cuda.core Device)."""
    device = getattr(executor, "device", None)
    if device is not None and hasattr(device, "set_current"):
        device.set_current()


def _compile_all(executor: Executor, source: str, todo: list[tuple[int, LaunchSpec]], workers: int,
                 progress: Progress) -> Iterator[tuple[int, Compiled | CompileFailed]]:
    """Build on `workers` threads and yield each configuration as soon as it is built, loaded on the consuming (timing)
    thread, so that the device validates and times the first ones while the rest still build. A progress line per
    build is the hang detector's pulse.
    An unexpected error on a thread (an executor cache raced) is retried alone on this thread at the end; a kernel
    fault ends the job once the builds already running are done (queued ones are cancelled)."""
    def one(item: tuple[int, LaunchSpec]) -> Compiled | CompileFailed:
        _, spec = item
        try:
            return executor.build(with_params(source, spec.bound), spec)
        except CompileFailed as failed:
            return failed

    def loaded(built: Compiled | CompileFailed) -> Compiled | CompileFailed:
        try:
            return executor.load(built) if isinstance(built, Compiled) else built
        except CompileFailed as failed:
            return failed

    retry: list[tuple[int, LaunchSpec]] = []
    if workers <= 1 or len(todo) <= 1:
        retry = todo
    else:
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tune-compile", initializer=_current_device,
                                  initargs=(executor,))
        try:
            futures = {pool.submit(one, item): item for item in todo}
            waiting, count = set(futures), 0
            while waiting:
                done, waiting = wait(waiting, timeout=HEARTBEAT_S, return_when=FIRST_COMPLETED)
                if not done:  # a long build (each is bounded by the compile limits) is no hang
                    progress(f"compiling: {len(waiting)} configuration(s) still building")
                    continue
                for future in done:
                    count += 1
                    item = futures[future]
                    progress(f"compiled {count}/{len(todo)}")
                    try:
                        kernel = future.result()
                    except KernelFault:
                        raise
                    except Exception:
                        retry.append(item)
                        continue
                    yield item[0], loaded(kernel)
        finally:  # after a fault or an error: queued builds are dropped, running ones (bounded by the compile
            # limits) waited for, since a Vulkan build holds the device and closing it under one crashed the worker
            pool.shutdown(wait=True, cancel_futures=True)
    for count, item in enumerate(retry, start=1):
        with heartbeat(progress, f"compiling {count}/{len(retry)} on this thread",
                       limit_s=confined.limits().pulse_s):
            built = one(item)
        yield item[0], loaded(built)


def tune(executor: Executor, job: TuneJob | dict[str, Any], progress: Progress) -> TuneResult:
    """Compile, prune, validate and time job.configs (each a full {name: value} configuration of job.spec): a
    ConfigResult per configuration, in order."""
    job = TuneJob.model_validate(job)
    started = time.perf_counter()
    problem = job_problem(executor, job, progress)
    dtype, sizes = job.dtype, job.sizes
    spec = job.spec
    configs = job.configs
    n = len(configs)
    seed = job.seed or 0
    results: list[ConfigResult | None] = [None] * n

    todo: list[tuple[int, LaunchSpec]] = []
    for i, params in enumerate(configs):
        try:
            bound = spec.bind(params)
            broken = bound.violated(sizes)
            if broken:
                results[i] = _result(bound.bound, "pruned", "where", f"where {broken} is false at {sizes}")
                continue
            launch_geometry(bound, problem, job.dtype, sizes)
        except AnnotationError as exc:
            results[i] = _result(params, "pruned", "geometry", str(exc))
            continue
        todo.append((i, bound))

    workers = max(1, min(len(todo), job.compile_workers or len(os.sched_getaffinity(0))))
    progress(f"compiling {len(todo)} of {n} configurations on {workers} thread(s)")
    bounds = dict(todo)
    best: float | None = None
    for i, kernel in _compile_all(executor, job.source, todo, workers, progress):
        params = bounds[i].bound
        if isinstance(kernel, CompileFailed):
            kind = "resources" if kernel.reason or _RESOURCES.search(kernel.log) else "compile"
            results[i] = _result(params, "pruned", kind, kernel.log.strip() or "the compiler failed without a log")
            continue
        spilled = kernel.resources.get("spill_store_bytes") or 0
        if spilled:  # over the register budget its launch bounds leave: local memory traffic, never the fastest
            results[i] = _result(params, "pruned", "resources", f"spills {spilled} bytes of registers to local "
                                 f"memory ({kernel.resources.get('registers')} registers per thread)")
            continue

        so_far = f"{best:.4g} ms" if best is not None else "none yet"
        what = f"config {i + 1}/{n}, " + ("re-timing the search's fastest" if job.retime else f"best so far {so_far}")

        def step(message: str, head: str = what) -> None:
            progress(f"{head}: {message}")

        measured = results[i] = _measure(executor, kernel, problem, dtype, sizes, job, seed, step)
        if measured.status == "ok" and measured.median_ms is not None:
            best = min(best if best is not None else float("inf"), measured.median_ms)
    # every configuration was pruned, or compiled and measured: no None is left
    return TuneResult(device=executor.facts, results=results, seconds=round(time.perf_counter() - started, 3))


def _measure(executor: Executor, kernel: Compiled, problem: Problem, dtype: str, sizes: dict[str, int],
             job: TuneJob, seed: int, step: Progress) -> ConfigResult:
    params = kernel.spec.bound
    if executor.facts.index < 0:
        return _result(params, "compiled", reason="compiled; this executor is compile-only, nothing was run")
    why = executor.check_geometry(kernel, launch_geometry(kernel.spec, problem, dtype, sizes))
    if why:
        return _result(params, "pruned", "resources" if _RESOURCES.search(why) else "geometry", why)
    try:
        validated = validate(executor, kernel, problem, dtype, sizes, trials=job.trials, seed=seed,
                             progress=step, sets=1)
    except KernelFault:
        raise
    except PeakError as exc:  # e.g. the ABI does not match the problem, buffers over a device limit
        return _result(params, "failed", "error", str(exc))
    try:
        verdict = validated.verdict
        if not verdict.passed:
            if verdict.check == "launch_geometry":
                return _result(params, "pruned", "geometry", f"{verdict.check}: {verdict.message}")
            return _result(params, "failed", "validation", f"{verdict.check}: {verdict.message}")
        timing = benchmark(executor, kernel, problem, dtype, sizes, validated,
                           time_budget_s=job.time_budget_s, min_reps=job.min_reps, max_reps=job.max_reps,
                           progress=step)
    finally:
        validated.close()
    if timing.recheck is not None and not timing.recheck.passed:
        return _result(params, "failed", "recheck", timing.recheck.message)
    return _result(params, "ok", median_ms=timing.median_ms, tflops=timing.tflops, gbps=timing.gbps, cv=timing.cv,
                   reps=timing.reps, p25_ms=timing.p25_ms, p75_ms=timing.p75_ms)
