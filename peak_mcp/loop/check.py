"""validate and benchmark: one version re-checked (and timed) at sizes the agent names, beside the vendor
yardstick timed in the same run; what that covers, and what only the submission's record says."""

from __future__ import annotations

from typing import Any

from peak_mcp.core.errors import InvalidInput, Unavailable
from peak_mcp.evaluation.noise import change
from peak_mcp.evaluation.phases import Verdict, dumped
from peak_mcp.loop.context import LoopContext, Progress, quiet
from peak_mcp.loop.models import CheckReport
from peak_mcp.loop.pipeline.evaluate import evaluate
from peak_mcp.loop.pipeline.verdicts import loop_caveat
from peak_mcp.loop.versions import Versions
from peak_mcp.runner.messages import EvaluateJob
from peak_mcp.store.records import Status, VersionRow
from peak_mcp.store.reports import performance


def check(ctx: LoopContext, versions: Versions, session_id: str, version: int | None, sizes: dict[str, Any] | None,
          *, benchmark: bool, trials: int | None = None, time_budget_s: float | None = None,
          progress: Progress = quiet) -> CheckReport:
    session = ctx.store.session(session_id)
    v = versions.resolve_version(session_id, version)
    problem = ctx.problem(session.problem)
    checked = problem.check_sizes({**session.sizes, **(sizes or {})})
    if session.device_index < 0:
        raise Unavailable(f"no {session.backend} device on this machine: versions can be compiled, not run",
                          "run the server on a machine with a GPU (see doctor).")
    if trials is not None and not 1 <= trials <= 20:
        raise InvalidInput(f"trials={trials} is out of range", "use 1 to 20.")
    if time_budget_s is not None and not 0.05 <= time_budget_s <= 60:
        raise InvalidInput(f"time_budget_s={time_budget_s} is out of range", "use 0.05 to 60 seconds.")
    steps = ("compile", "validate", "benchmark") if benchmark else ("compile", "validate")
    params = v.timing.params if v.timing else None  # the configuration the version's time is of
    outcome = evaluate(ctx, session, v.source, progress, sizes=checked, steps=steps, trials=trials,
                       time_budget_s=time_budget_s, params=params)
    if params and outcome.timing:  # the version's configuration, and where it came from, as recorded
        outcome.timing = outcome.timing.configured_as(v.timing)
    baseline = None
    if benchmark and outcome.status is Status.BENCHMARKED:
        job = EvaluateJob(**ctx.wire(session), dtype=session.dtype, sizes=checked, steps=["baseline"],
                          time_budget_s=time_budget_s or ctx.settings.benchmark_budget_s)
        baseline = ctx.yardstick_said(session, ctx.run_job(session, job, progress).baseline)
    perf = None
    if outcome.timing:
        device = ctx.device_of(session)
        # no other versions: this run alone (no ratio), its configuration's origin named after the real parent
        perf = performance(v.model_copy(update={"timing": outcome.timing}), {}, baseline, device,
                           problem.peak_path(session.dtype, session.backend), ctx.roofline(session, checked, baseline))
    validation = outcome.validation or Verdict(passed=False, check=outcome.failure, message=outcome.message)
    caveat = loop_caveat(validation, ctx.device_of(session), checked)
    if caveat:
        validation = validation.model_copy(update={"message": validation.message + caveat})
    scope = _check_scope(v)
    if perf is not None and outcome.timing and v.timing and v.timing.median_ms and checked == session.sizes:
        # A re-timing beside the record it does not replace: an agent read 9.18 ms here while history kept 4.72
        perf["recorded_ms"] = v.timing.median_ms
        perf["vs_recorded"] = change(outcome.timing, v.timing)
        # One run of one version: it changes no ratio (a lone loaded run of v0 turned a 2-3x slower child into
        # 'noise', agent45 #8); comparisons read records, or pairs timed back to back.
        scope += (f"; history keeps v{v.number}'s recorded {v.timing.median_ms:.4g} ms, against which this run, "
                  f"{outcome.timing.median_ms:.4g} ms, is {perf['vs_recorded']}; ratios keep reading the records "
                  "(re-time two versions back to back by benchmarking both in a row)")
    return CheckReport(session_id=session_id, version=v.number, sizes=checked, passed=outcome.status.passed,
                       validation=validation.model_dump(mode="json"), performance=perf,
                       baseline=dumped(baseline), scope=scope)


def _check_scope(v: VersionRow) -> str:
    """What validate/benchmark covered: only the sizes asked for; the other sizes and the sanitizer are the
    submission's, said as recorded there."""
    g = v.generality
    generality = ("not run" if g is None or g.passed is None else
                  f"passed at {len(g.sizes_checked)} sizes" if g.passed else
                  f"failed at {len(g.failures)} of {len(g.sizes_checked)} sizes")
    s = v.validation.sanitizer if v.validation else None
    sanitizer = ("not run" if s is None or not s.available or s.passed is None else
                 "passed" if s.passed else f"failed ({s.failures[0].check})" if s.failures else "failed")
    return (f"this check ran only at the sizes above; other sizes and the sanitizer are not re-run here. "
            f"v{v.number}'s submission recorded: generality {generality}, sanitizer {sanitizer}")
