"""A session's prepare job (no kernel runs): what its next submission would otherwise wait for.

The first submission of a session paid 30-40 s on an H200 that no kernel caused: preparing the worker's checks for
the problem (priming.py, 9 s), the references at the session's sizes (a KernelBench file's: 17 s), the first calls
at generality's sizes and the sanitizer's first targets (12 s for conv2d). An agent takes longer than that to write
its first kernel, so the server sends this job when the session starts (loop/pipeline/prepare.py), and again after
each submission for what the next one draws afresh (generality's drawn size, fresh sets used once). Nothing is
judged here: the input sets are the ones `validate` would draw (steps.prepare), kept where later validations look
them up.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from peak_mcp.backends.base import Executor
from peak_mcp.backends.toolkit import find_tool
from peak_mcp.core.errors import PeakError
from peak_mcp.evaluation.steps import ReferenceMismatch, prepare
from peak_mcp.problems.shipped import worker_problem
from peak_mcp.runner import problem_link
from peak_mcp.runner.messages import PrepareJob
from peak_mcp.runner.replies import PrepareResult

Progress = Callable[[str], None]


def prepare_session(executor: Executor, job: PrepareJob, progress: Progress) -> PrepareResult:
    """Start the sanitizer's standby targets where asked; keep the input sets of the session's validation and of
    one trial at each generality size (the worker has primed the problem before this runs) and the spare fresh
    sets asked for. A size that cannot be prepared is skipped with why: the submission meets it again and reports it
    as its own."""
    started = time.perf_counter()
    problem = worker_problem(job.problem, job.declaration)
    problem_link.attach(problem)  # a problem file's code runs in its problem host
    seed = job.seed if job.seed is not None else 0
    result = PrepareResult()
    # the targets first: they start in the background (4 processes, each opening a CUDA context under the tool)
    # while the sets are drawn, so they are ready the sooner for a first submission that comes early
    if job.sanitizer_standby and executor.sanitizer and executor.backend != "hlsl" and executor.facts.index >= 0:
        from peak_mcp.runner import sanitizer

        path = find_tool("compute-sanitizer")
        if path is not None:
            progress("starting the sanitizer's targets")
            sanitizer.Standby.prepare(path, sanitizer.TOOLS, executor.facts.index, executor.backend)
    plan = [(job.sizes, job.trials, job.keep_sets, True)] + [(sizes, 1, True, False) for sizes in job.sizes_list]
    for sizes, trials, keep, own in plan:
        label = " ".join(f"{k}={v}" for k, v in sizes.items())
        progress(f"preparing the session's checks at {label}")
        try:
            result.made += prepare(executor, problem, job.dtype, sizes, trials=trials, seed=seed, keep=keep,
                                   spare_fresh=own and job.spare_fresh,
                                   spare_revalidation=own and job.spare_revalidation,
                                   progress=lambda line, label=label: progress(f"preparing at {label}: {line}"))
        except (PeakError, ReferenceMismatch) as exc:
            result.skipped.append(f"{label}: {str(exc)[:200]}")
    result.seconds = round(time.perf_counter() - started, 3)
    return result
