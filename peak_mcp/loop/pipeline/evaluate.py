"""Evaluation, the pipeline's central phase: one source compiled, validated and timed by the session's worker at one
configuration and size (compile -> validate -> benchmark), and what that result means (verdicts.judge)."""

from __future__ import annotations

from typing import Any

from peak_mcp.core.errors import PeakError
from peak_mcp.core.launch import beyond_portable_limits
from peak_mcp.evaluation.profiling.occupancy import shared_optin_bytes
from peak_mcp.loop.context import LoopContext, Progress
from peak_mcp.loop.pipeline.verdicts import judge
from peak_mcp.runner.messages import EvaluateJob
from peak_mcp.runner.pool import JobFailed
from peak_mcp.runner.replies import EvaluateResult
from peak_mcp.store.records import Outcome, SessionRow, Status


def evaluate(ctx: LoopContext, session: SessionRow, source: str, progress: Progress,
             sizes: dict[str, int] | None = None, steps: tuple[str, ...] = ("compile", "validate", "benchmark"),
             trials: int | None = None, time_budget_s: float | None = None,
             vendor_ms: float | None = None, params: dict[str, int] | None = None) -> Outcome:
    """Parse, compile, validate and time one source (its default configuration, or `params`)."""
    try:
        spec = ctx.spec(session, source)
        if params:
            spec = spec.bind(params)
        broken = spec.violated(sizes or session.sizes)
        if broken:
            return Outcome(status=Status.INVALID_ANNOTATION, failure="annotation",
                           message=f"the configuration {spec.config()} breaks `where` {broken} at these sizes")
        geometry = spec.evaluate(sizes or session.sizes)
    except PeakError as exc:
        return Outcome(status=Status.INVALID_ANNOTATION, failure="annotation", message=str(exc))
    runs = session.device_index >= 0
    # with a device, its own limits are checked; without one, every device's, and the target's shared memory
    beyond = None if runs else beyond_portable_limits(geometry) or _over_target_shared(ctx, session, geometry)
    if beyond:
        return Outcome(status=Status.INVALID_ANNOTATION, failure="launch_geometry",
                       message=f"the launch at these sizes cannot run: {beyond}")
    job = EvaluateJob(**ctx.wire(session), dtype=session.dtype, sizes=sizes or session.sizes, source=source,
                      spec=spec, steps=list(steps) if runs else ["compile"],
                      trials=trials or ctx.settings.validation_trials,
                      time_budget_s=time_budget_s or ctx.settings.benchmark_budget_s, vendor_ms=vendor_ms)
    try:
        result = ctx.run_job(session, job, progress)
    except JobFailed as exc:
        return Outcome(status=Status.ERROR, failure=exc.kind, message=str(exc))
    return verdict(ctx, session, result, runs, sizes or session.sizes)


def verdict(ctx: LoopContext, session: SessionRow, result: EvaluateResult, runs: bool,
            sizes: dict[str, int]) -> Outcome:
    """The outcome of one worker result at `sizes`: the first failing check, in order of blame
    (verdicts.judge)."""
    return judge(result, problem=ctx.problem(session.problem), backend=session.backend, dtype=session.dtype,
                 sizes=sizes, device=ctx.device_of(session), runs=runs)


def _over_target_shared(ctx: LoopContext, session: SessionRow, geometry: dict[str, Any]) -> str | None:
    """Dynamic shared memory past what the session's CUDA target gives a block (its opt-in limit), or None."""
    if session.backend != "cuda":
        return None
    device = ctx.device_of(session)
    limit, shared = shared_optin_bytes(device), int(geometry.get("shared") or 0)
    if limit is None or shared <= limit:
        return None
    return f"shared={shared:,} bytes is over the {limit:,} a block may have on {device.arch}"
