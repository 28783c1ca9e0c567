"""Generality and the sanitizer, the phases after a version passes at the session's sizes: it is validated at the
problem's awkward sizes within the session's constraints, then run under compute-sanitizer (CUDA) or the Vulkan
validation layer (HLSL) at one of them. A crash or hang at a sampled size, or a sanitizer finding, fails it; a wrong
result at another size makes it not_general."""

from __future__ import annotations

import time
from typing import Any

from peak_mcp.backends.registry import backend_spec
from peak_mcp.evaluation.generality import sample_sizes
from peak_mcp.evaluation.phases import Generality, SanitizerReport, SizeFailure
from peak_mcp.loop.context import LoopContext, Progress
from peak_mcp.loop.pipeline.verdicts import above_session, also_wrong, named_sizes, not_general_message
from peak_mcp.problems.declared import DeclaredProblem
from peak_mcp.runner.messages import GeneralityJob
from peak_mcp.runner.pool import JobFailed
from peak_mcp.store.records import Outcome, SessionRow, Status

# Generality failures that make a version wrong, not merely specialized: at a legal (and small) size it crashes the
# device or its worker, or never finishes. Guard-detected accesses at other sizes are what an unguarded tile kernel
# does: those keep head where it is and stay in the generality report.
DEVICE_FAULTS = ("kernel_fault", "worker_died", "timeout")
# The sanitizer slows a launch 10-100x: at the session's sizes only when they are small (Problem.work: flops or bytes)
SANITIZER_MAX_FLOPS = 2e10
# ... and GPU-assisted validation on a CPU Vulkan device (lavapipe) runs an instrumented shader at CPU speed.
VULKAN_SANITIZER_MAX_FLOPS = 1e9


def with_generality(ctx: LoopContext, session: SessionRow, source: str, outcome: Outcome, progress: Progress,
                    params: dict[str, int] | None = None) -> Outcome:
    """The outcome once generality and the sanitizer have run (at `params`, the configuration timed): a crash
    or hang at a sampled size, or a sanitizer finding, fails it; a wrong result at another size makes it
    not_general."""
    generality, sanitized = sizes_and_sanitizer(ctx, session, source, progress, params)
    update: dict[str, Any] = {"generality": generality}
    if sanitized and outcome.validation is not None:  # kept with the verdict at the session's sizes
        update["validation"] = outcome.validation.model_copy(update={"sanitizer": sanitized})
    outcome = outcome.model_copy(update=update)
    unsafe = next((f for f in generality.failures if f.check in DEVICE_FAULTS
                   and not (f.check == "timeout" and above_session(ctx.problem(session.problem), session.sizes,
                                                                   f.sizes))),
                  None)
    if unsafe:
        return outcome.model_copy(update={"status": Status.FAILED, "failure": unsafe.check,
                                          "message": f"at sizes {unsafe.sizes} (generality): {unsafe.message}"})
    if sanitized and sanitized.failures:
        first = sanitized.failures[0]
        return outcome.model_copy(update={"status": Status.FAILED, "failure": first.check,
                                          "message": f"{first.message} (at {sanitized.sizes})"
                                                     + also_wrong(generality)})
    if generality.passed is False and generality.failures:
        problem = ctx.problem(session.problem)
        return outcome.model_copy(update={"status": Status.NOT_GENERAL,
                                          "failure": f"generality_{generality.failures[0].check}",
                                          "message": not_general_message(
                                              outcome, generality, problem.symbols,
                                              bound_declarable=isinstance(problem, DeclaredProblem)
                                              and not problem.declaration.has_error_scale)})
    return outcome


def sizes_and_sanitizer(ctx: LoopContext, session: SessionRow, source: str, progress: Progress,
                        params: dict[str, int] | None = None) -> tuple[Generality, SanitizerReport | None]:
    """Validate at the problem's awkward sizes within the session's constraints, then (CUDA, where installed)
    run compute-sanitizer at one of them. A fault at one size (the worker dies) is that size's verdict, not
    the version's. Returns (generality, sanitizer report or None)."""
    problem = ctx.problem(session.problem)
    constraints = session.constraints or []
    sizes_list = sample_sizes(problem, session.sizes, constraints)
    sanitize_at = None
    # compute-sanitizer watches the CUDA driver: HIP sessions on NVIDIA qualify, HIP on AMD does not. HLSL's
    # is the Vulkan validation layer's GPU-assisted validation, on any Vulkan driver.
    if ctx.settings.sanitizer and backend_spec(session.backend).sanitizer and \
            (session.backend == "hlsl" or ctx.device_of(session).vendor != "amd"):
        # One of the sampled sizes; with none, the session's own when small (the sanitizer slows a launch a lot).
        fallback = sizes_list[-1] if sizes_list else (
            session.sizes if problem.work(session.sizes, session.dtype) <= (
                VULKAN_SANITIZER_MAX_FLOPS if session.backend == "hlsl" else SANITIZER_MAX_FLOPS) else None)
        sanitize_at = next((s for s in sizes_list if min(s.values()) >= 16), fallback)
    unchecked = Generality(passed=None, sizes_checked=[], failures=[], constraints=constraints,
                           note=f"no sampled size meets the constraints {constraints}: generality is unchecked"
                           if problem.symbols else "the problem's shapes are fixed (no size symbols): no other "
                           "sizes to check")
    if not sizes_list and sanitize_at is None:
        return unchecked, None
    started = time.perf_counter()
    spec = ctx.spec(session, source)
    if params:
        spec = spec.bind(params)
    job = GeneralityJob(**ctx.wire(session), dtype=session.dtype, source=source, spec=spec,
                        sizes_list=sizes_list, sanitize_sizes=sanitize_at)
    sanitized = None
    try:
        result = ctx.run_job(session, job, progress)
        generality, sanitized = result.generality or Generality(), result.sanitizer  # none: did not compile
    except JobFailed as exc:
        if not exc.stage.startswith("generality at "):  # e.g. during compute-sanitizer: nothing known of sizes
            return Generality(passed=None, sizes_checked=[], failures=[],
                              note=f"the check stopped during '{exc.stage}': {exc}"), None
        at = exc.stage.removeprefix("generality at ")
        # Only the sizes up to the one it stopped at were checked; the rest never ran.
        stopped = named_sizes(at)
        reached = next((i + 1 for i, s in enumerate(sizes_list) if s == stopped), len(sizes_list))
        generality = Generality(passed=False, sizes_checked=sizes_list[:reached],
                                failures=[SizeFailure(sizes=at, check=exc.kind, message=str(exc))])
        if reached < len(sizes_list):
            generality.note = (f"the check stopped at {at.split(':')[0]}; {len(sizes_list) - reached} sizes "
                               "after it were not checked")
    if not sizes_list:
        generality = unchecked
    generality.seconds = round(time.perf_counter() - started, 3)
    if constraints:
        generality.constraints = constraints
    return generality, sanitized
