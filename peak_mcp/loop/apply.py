"""apply_transformation as a small state machine, so any transport can drive it.

A run starts with a brief; each LLM reply becomes one recorded attempt (a version with apply_id and attempt);
a failed attempt yields the next brief with the compiler or validation feedback, until success or the bound.
The MCP layer drives it either inside one tool call (sampling over a back-channel) or across retried calls
(input-required rounds); where the client cannot sample, the agent answers through submit_kernel.
"""

from __future__ import annotations

from peak_mcp.catalog.brief import (
    SYSTEM_PROMPT,
    FailedAttempt,
    KernelTask,
    Standing,
    build_brief,
    build_retry,
    extract_kernel,
)
from peak_mcp.catalog.rendering import render_body
from peak_mcp.catalog.suggest import missing_prerequisites
from peak_mcp.catalog.transformations import Catalog
from peak_mcp.core.errors import InvalidInput, PeakError
from peak_mcp.evaluation.generality import sample_sizes
from peak_mcp.evaluation.noise import FASTER, NOISE, SLOWER, spread
from peak_mcp.loop.context import Progress, quiet
from peak_mcp.loop.models import ApplyStep, VersionReport
from peak_mcp.loop.service import PeakService
from peak_mcp.store.records import ApplyRunRow, Status
from peak_mcp.store.reports import trim_log

LANGUAGE = {"cuda": "cuda", "hip": "cpp", "hlsl": "hlsl"}
MAX_ATTEMPTS_LIMIT = 10
MAX_INSTRUCTIONS_CHARS = 4000  # stored with the run and repeated in every brief of it


class Applier:
    def __init__(self, service: PeakService, catalog: Catalog) -> None:
        self.service = service
        self.catalog = catalog

    def begin(self, session_id: str, transformation: str, version: int | None = None,
              instructions: str | None = None, max_attempts: int | None = None, exact: bool = False) -> ApplyStep:
        """A new run. The catalog's most specific text for the session's backend, device and dtype is what the LLM
        gets (the answer's note names it when it is not `transformation`'s own), or with `exact` the text asked
        for; the choice is kept with the run."""
        if instructions is not None and len(instructions) > MAX_INSTRUCTIONS_CHARS:
            raise InvalidInput(f"instructions are {len(instructions)} characters, over the {MAX_INSTRUCTIONS_CHARS}-"
                               "character limit", "say what the LLM should do differently in a few sentences.")
        base = self.service.resolve_version(session_id, version)
        if not (base.status.usable or base.status.passed_here):
            raise InvalidInput(f"version {base.number} has status {base.status}; transformations apply to "
                               "passing versions", "pick a benchmarked version (see history) or omit version.")
        self.catalog.get(transformation)  # NotFound with close matches
        attempts = self.service.settings.default_max_attempts if max_attempts is None else max_attempts
        if not 1 <= attempts <= MAX_ATTEMPTS_LIMIT:
            raise InvalidInput(f"max_attempts={attempts} is out of range", f"use 1 to {MAX_ATTEMPTS_LIMIT}.")
        session = self.service.store.session(session_id)
        # Refused before a run is recorded: a CUDA text for an HLSL session, an f16-only text for an f32 one.
        text = self.catalog.resolve_for_session(transformation, session.backend, session.dtype,
                                                self.service.device_of(session), exact=exact,
                                                problem=session.problem,
                                                traits=self.service.problem(session.problem).traits)
        run_id = self.service.store.create_apply_run(session_id=session_id, transformation=transformation,
                                                     base_version=base.number, instructions=instructions,
                                                     max_attempts=attempts, resolved=text.id)
        return self.step(run_id)

    def _task(self, run: ApplyRunRow) -> tuple[KernelTask, str]:
        session = self.service.store.session(run.session_id)
        problem = self.service.problem(session.problem)
        if run.resolved and run.resolved in self.catalog:  # the text chosen when the run began
            resolved = self.catalog.get(run.resolved)
        else:  # runs from before that was kept, or a text no longer in the catalog
            resolved = self.catalog.resolve_for_session(run.transformation, session.backend, session.dtype,
                                                        self.service.device_of(session))
        task = KernelTask(
            problem=problem.name, problem_title=problem.title, abi=problem.abi(session.backend, session.dtype),
            definition=problem.definition,
            backend=session.backend, dtype=session.dtype, sizes=session.sizes,
            device=self.service.device_of(session), transformation_id=resolved.id,
            transformation_title=resolved.title,
            transformation_body=render_body(resolved.body, session.backend, self.service.device_of(session).arch),
            instructions=run.instructions, language=LANGUAGE.get(session.backend, "cpp"),
            constraints=session.constraints or [],
            generality_sizes=sample_sizes(problem, session.sizes, session.constraints or []),
            missing_first=missing_prerequisites(self.catalog, session, self.service.store.versions(run.session_id),
                                                run.base_version, problem, self.service.device_of(session),
                                                resolved.id))
        return task, resolved.id

    def _standing(self, session_id: str) -> Standing:
        """The session's current best and its yardstick, read fresh for every brief (head moves between runs)."""
        session = self.service.store.session(session_id)
        baseline = session.baseline
        device = self.service.device_of(session)
        peak_path = self.service.problem(session.problem).peak_path(session.dtype, session.backend)
        standing = Standing(head=session.head, peak_path=peak_path,
                            peak_tflops=device.peak(peak_path), cpu_device=device.is_cpu)
        if baseline and baseline.available:
            standing.vendor_ms, standing.vendor_name = baseline.median_ms, baseline.library
        if session.head is not None:
            report = self.service.version_report(session_id, session.head)
            perf = report.performance or {}
            standing.head_ms, standing.head_tflops = perf.get("median_ms"), perf.get("tflops")
            standing.head_gbps = perf.get("gbps")
            standing.head_pct_of_peak = perf.get("pct_of_peak")
            standing.head_spread_ms = self._spread(session_id, session.head)
            standing.best = report.best
        if standing.best is not None:
            perf = self.service.version_report(session_id, standing.best).performance or {}
            standing.best_ms, standing.best_tflops = perf.get("median_ms"), perf.get("tflops")
            standing.best_gbps = perf.get("gbps")
            standing.best_pct_of_peak = perf.get("pct_of_peak")
            standing.best_spread_ms = self._spread(session_id, standing.best)
        return standing

    def _spread(self, session_id: str, number: int) -> tuple[float, float] | None:
        timing = self.service.store.version(session_id, number).timing
        return spread(timing) if timing and timing.median_ms else None

    def _brief(self, run: ApplyRunRow, attempts: list[VersionReport]) -> tuple[str, str]:
        task, resolved = self._task(run)
        standing = self._standing(run.session_id)
        store = self.service.store
        base = store.version(run.session_id, run.base_version)
        if not attempts:
            return build_brief(task, standing, base.source, max_attempts=run.max_attempts,
                               version=base.number), resolved
        last = attempts[-1]
        failed_row = store.version(run.session_id, last.version)
        parent = store.version(run.session_id, last.parent) if last.parent is not None else base
        failed = FailedAttempt(attempt=len(attempts), version=last.version, status=last.status,
                               failure=last.failure, verdict=_verdict(last), source=failed_row.source,
                               parent=parent.number, parent_source=parent.source,
                               usable=last.status != "invalid_reply")
        earlier = [f"attempt {i} (version {a.version}): {a.status}" + (f" ({a.failure})" if a.failure else "")
                   for i, a in enumerate(attempts[:-1], start=1)]
        brief = build_retry(task, standing, failed, attempt=run.attempts + 1, max_attempts=run.max_attempts,
                            earlier=earlier)
        return brief, resolved

    def attempts(self, run_id: str) -> list[VersionReport]:
        run = self.service.store.apply_run(run_id)
        return [self.service.version_report(run.session_id, v.number)
                for v in self.service.store.versions(run.session_id) if v.apply_id == run_id]

    def step(self, run_id: str) -> ApplyStep:
        """Where the run stands: the next brief, or the outcome."""
        run = self.service.store.apply_run(run_id)
        attempts = self.attempts(run_id)
        if run.state == "open":
            brief, resolved = self._brief(run, attempts)
        else:
            brief, resolved = None, self._task(run)[1]
        session = self.service.store.session(run.session_id)
        note = self.catalog.specialization_note(run.transformation, resolved, session.backend,
                                                self.service.device_of(session))
        step = ApplyStep(run_id=run_id, session_id=run.session_id, transformation=run.transformation,
                         resolved_transformation=resolved, note=note, attempt=run.attempts + 1,
                         max_attempts=run.max_attempts, done=run.state != "open", attempts=attempts)
        if run.state == "succeeded":
            step.succeeded, step.result = True, attempts[-1].version
            step.attempt = run.attempts
            perf = attempts[-1].performance or {}
            step.speed = perf.get("change_vs_parent")
            ratio = perf.get("speedup_vs_parent")
            verdict = {FASTER: "a speedup beyond noise", SLOWER: "a slowdown beyond noise",
                       NOISE: "within noise: no speedup shown"}.get(step.speed or "", "speed against it not known")
            speed = f"{ratio:.3g}× its parent: {verdict}" if ratio is not None else verdict
            step.message = (f"applied and passed in {run.attempts} attempt(s): version {attempts[-1].version}, "
                            f"{speed}; " + self.service.standing_note(run.session_id, attempts[-1].version))
            return step
        if run.state == "exhausted":
            step.attempt = run.attempts
            step.result = attempts[-1].version if attempts else None
            step.message = (f"all {run.max_attempts} attempts failed; the last: "
                            f"{attempts[-1].failure if attempts else 'none'}")
            specialized = [a.version for a in attempts if a.status is Status.NOT_GENERAL]
            if specialized:
                step.message += (f". Right at the session's sizes only: version(s) {specialized}; "
                                 f"revert(version={specialized[-1]}, require_generality=false) accepts one as a "
                                 "specialized kernel")
            return step
        step.brief, step.system_prompt = brief, SYSTEM_PROMPT
        step.message = f"attempt {run.attempts + 1} of {run.max_attempts}: waiting for a kernel"
        return step

    def declined(self, run_id: str, why: str) -> ApplyStep:
        """The run where the client declined (or failed) a sampling request: still open, with what its attempts came
        to and how the agent goes on without sampling."""
        step = self.step(run_id)
        done = "; ".join(f"v{a.version} {a.status}" + (f" ({a.failure})" if a.failure else "") for a in step.attempts)
        step.message = (f"sampling was declined by the client ({why}); "
                        + (f"{len(step.attempts)} attempt(s) recorded: {done}. " if step.attempts
                           else "no attempt was recorded. ")
                        + f"The run stays open: write the kernel yourself from the brief (or the text from "
                        f"get_transformation(transformation={step.resolved_transformation!r})) and call "
                        f"submit_kernel(session_id={step.session_id!r}, source=..., "
                        f"transformation={step.transformation!r}); it is recorded as this run's next attempt")
        return step

    def answer(self, run_id: str, reply: str, progress: Progress = quiet) -> ApplyStep:
        """Record one LLM reply as an attempt and advance the run."""
        run = self.service.store.apply_run(run_id)
        if run.state != "open":
            raise InvalidInput(f"apply run {run_id} is already {run.state}",
                               "start a new run with apply_transformation.")
        try:
            source = extract_kernel(reply)
        except PeakError as exc:
            source = reply if reply.strip() else "(empty reply)"
            report = self._record_unparsable(run, source, str(exc))
        else:
            report = self.service.submit_kernel(run.session_id, source, parent=run.base_version,
                                                transformation=run.transformation, progress=progress,
                                                apply_id=run_id, attempt=run.attempts + 1)
        return self._advance(run, report)

    def attach_submission(self, session_id: str, transformation: str, source: str, parent: int | None,
                          progress: Progress) -> VersionReport | None:
        """A submit_kernel naming a transformation with an open run answers that run (the no-sampling path)."""
        open_runs = [r for r in self.service.store.apply_runs(session_id, state="open")
                     if r.transformation == transformation]
        if not open_runs:
            return None
        run = open_runs[-1]
        report = self.service.submit_kernel(session_id, source, parent=parent if parent is not None
                                            else run.base_version, transformation=transformation,
                                            progress=progress, apply_id=run.id, attempt=run.attempts + 1)
        self._advance(run, report)
        return report

    def _record_unparsable(self, run: ApplyRunRow, source: str, why: str) -> VersionReport:
        store = self.service.store
        number = store.add_version(run.session_id, parent=run.base_version, origin="apply",
                                   transformation=run.transformation, apply_id=run.id,
                                   attempt=run.attempts + 1, source=source, status="invalid_reply",
                                   failure="reply_format", message=f"the reply could not be used: {why}")
        return self.service.version_report(run.session_id, number)

    def _advance(self, run: ApplyRunRow, report: VersionReport) -> ApplyStep:
        attempts = run.attempts + 1
        if report.status.usable:
            state = "succeeded"
        elif attempts >= run.max_attempts:
            state = "exhausted"
        else:
            state = "open"
        self.service.store.update_apply_run(run.id, attempts=attempts, state=state,
                                            result_version=report.version if state == "succeeded" else None)
        return self.step(run.id)


def _verdict(report: VersionReport) -> str:
    """The failed attempt's verdict, said once: the whole compiler log (a report's message gives only its first
    error), or the failing check with its numbers."""
    text = report.message.strip()
    if report.status == "compile_error" and report.compile and report.compile.log.strip():
        log = report.compile.log.strip()
        text = text if log in text else "compilation failed:\n" + trim_log(log)
    return text or f"{report.status} ({report.failure})"
