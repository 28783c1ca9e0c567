"""What a worker does for one job. Pure functions over an Executor; the worker loop handles the transport."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from peak_mcp.backends.base import CompileFailed, Executor
from peak_mcp.evaluation import benchmark, validate
from peak_mcp.launch import LaunchSpec
from peak_mcp.problems import get_problem

Progress = Callable[[str], None]


def evaluate(executor: Executor, job: dict[str, Any], progress: Progress) -> dict[str, Any]:
    """Compile, then (as asked in job['steps']) validate, benchmark and time the vendor baseline."""
    steps = set(job.get("steps", ["compile"]))
    problem = get_problem(job["problem"])
    dtype, sizes = job["dtype"], {k: int(v) for k, v in job["sizes"].items()}
    result: dict[str, Any] = {"device": executor.facts.__dict__}
    if "source" in job:
        spec = LaunchSpec.model_validate(job["spec"])
        started = time.perf_counter()
        progress("compile")
        try:
            kernel = executor.compile(job["source"], spec)
        except CompileFailed as failed:
            result["compile"] = {"ok": False, "log": failed.log, "seconds": time.perf_counter() - started}
            return result
        result["compile"] = {"ok": True, "log": kernel.log, "resources": kernel.resources,
                             "seconds": time.perf_counter() - started}
        if "validate" in steps or "benchmark" in steps:
            seed = int(job.get("seed", time.time_ns() % 2**31))
            started = time.perf_counter()
            validated = validate(executor, kernel, problem, dtype, sizes, trials=int(job.get("trials", 3)),
                                 seed=seed, progress=progress)
            result["validation"] = {**validated.verdict, "seconds": time.perf_counter() - started}
            try:
                if validated.verdict["passed"] and "benchmark" in steps:
                    started = time.perf_counter()
                    timing = benchmark(
                        executor, kernel, problem, dtype, sizes, validated,
                        time_budget_s=float(job.get("time_budget_s", 1.0)), min_reps=int(job.get("min_reps", 10)),
                        max_reps=int(job.get("max_reps", 1000)), progress=progress)
                    # wall_s is the timed loop alone; seconds adds warm-up and the output re-check
                    result["timing"] = {**timing, "device_name": executor.facts.name,
                                        "seconds": time.perf_counter() - started}
            finally:
                if validated.workspace is not None:
                    validated.workspace.close()
    if "baseline" in steps:
        progress("vendor baseline")
        import numpy as np

        inputs = problem.make_inputs(sizes, dtype, np.random.default_rng(int(job.get("seed", 0))))
        result["baseline"] = executor.baseline(problem.name, dtype, sizes, inputs,
                                               float(job.get("time_budget_s", 1.0)))
    return result
