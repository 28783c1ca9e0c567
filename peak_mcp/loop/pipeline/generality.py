"""Generality and the sanitizer, the phases after a version passes at the session's sizes: it is validated at the
problem's awkward sizes within the session's constraints, then run under compute-sanitizer (CUDA) or the Vulkan
validation layer (HLSL) at one of them. A crash or hang at a sampled size, or a sanitizer finding, fails it; a wrong
result at another size makes it not_general."""

from __future__ import annotations

import random
import time
from typing import Any

from peak_mcp.backends.registry import backend_spec
from peak_mcp.core.text_safety import clean
from peak_mcp.evaluation.generality import PASSED, UNJUDGED, largest_sizes, launch_breach, read_size_note, sample_sizes
from peak_mcp.evaluation.phases import Generality, SanitizerReport, SizeFailure
from peak_mcp.loop.context import WORKER_TEXT_CHARS, LoopContext, Progress
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


Checked = tuple[Generality, SanitizerReport | None]


def with_generality(ctx: LoopContext, session: SessionRow, source: str, outcome: Outcome, progress: Progress,
                    params: dict[str, int] | None = None, checked: Checked | None = None) -> Outcome:
    """The outcome once generality and the sanitizer have run (at `params`, the configuration timed): a crash
    or hang at a sampled size, or a sanitizer finding, fails it; a wrong result at another size makes it
    not_general. `checked`: what sizes_and_sanitizer found already (on an idle twin device, beside.py)."""
    generality, sanitized = checked or sizes_and_sanitizer(ctx, session, source, progress, params)
    update: dict[str, Any] = {"generality": generality}
    if sanitized and outcome.validation is not None:  # kept with the verdict at the session's sizes
        update["validation"] = outcome.validation.model_copy(update={"sanitizer": sanitized})
    outcome = outcome.model_copy(update=update)

    def above(failure: SizeFailure) -> bool:
        return above_session(ctx.problem(session.problem), session.sizes, failure.sizes)

    # A crash, or a hang at a size no larger than the session's, fails the version. A hang at a larger size may be
    # the machine's: where other sizes gave wrong results those lead, the hang said as secondary (an attention kernel
    # wrong at 11 of 13 sizes was once reported as one timeout, "this machine is busy").
    unsafe = next((f for f in generality.failures if f.check in DEVICE_FAULTS
                   and not (f.check == "timeout" and above(f))), None)
    if unsafe:
        return outcome.model_copy(update={"status": Status.FAILED, "failure": unsafe.check,
                                          "message": f"at sizes {unsafe.sizes} (generality): {unsafe.message}"
                                                     + also_wrong(generality, besides=unsafe)})
    if sanitized and sanitized.failures:
        first = sanitized.failures[0]
        return outcome.model_copy(update={"status": Status.FAILED, "failure": first.check,
                                          "message": f"{first.message} (at {sanitized.sizes})"
                                                     + also_wrong(generality)})
    if generality.passed is False and generality.failures:
        wrong = [f for f in generality.failures if f.check != "timeout"]
        problem = ctx.problem(session.problem)
        return outcome.model_copy(update={"status": Status.NOT_GENERAL,
                                          "failure": f"generality_{(wrong or generality.failures)[0].check}",
                                          "message": not_general_message(
                                              outcome, generality, problem.symbols,
                                              bound_declarable=isinstance(problem, DeclaredProblem)
                                              and not problem.declaration.has_error_scale)})
    return outcome


def sanitizer_runs(ctx: LoopContext, session: SessionRow) -> bool:
    """Whether a submission of this session runs a sanitizer: compute-sanitizer watches the CUDA driver (HIP
    sessions on NVIDIA qualify, HIP on AMD does not); HLSL's is the Vulkan validation layer's GPU-assisted
    validation, on any Vulkan driver."""
    return bool(ctx.settings.sanitizer and backend_spec(session.backend).sanitizer
                and (session.backend == "hlsl" or ctx.device_of(session).vendor != "amd"))


def sizes_and_sanitizer(ctx: LoopContext, session: SessionRow, source: str, progress: Progress,
                        params: dict[str, int] | None = None, device: int | None = None) -> Checked:
    """Validate at the problem's awkward sizes within the session's constraints, then (CUDA, where installed)
    run compute-sanitizer at one of them. A fault at one size (the worker dies) is that size's verdict, not
    the version's: the sizes after it are checked in a fresh worker (MAX_STOPS, the job's total limit), and
    the verdicts of those before it come from its progress (size_note). `device`: another device of the
    session's model to run them on (default: the session's). Returns (generality, sanitizer report or None)."""
    problem = ctx.problem(session.problem)
    constraints = session.constraints or []
    # One size drawn per check from the OS: a kernel cannot know it in advance (the sampled ones are named in briefs).
    # Its seed may have been drawn ahead, for a prepare job to draw the size's inputs before this check.
    sizes_list = sample_sizes(problem, session.sizes, constraints, draw=random.Random(ctx.take_draw(session.id)))
    sanitize_at = None
    if sanitizer_runs(ctx, session):
        # One of the sampled sizes; with none, the session's own when small (the sanitizer slows a launch a lot).
        fallback = sizes_list[-1] if sizes_list else (
            session.sizes if problem.work(session.sizes, session.dtype) <= (
                VULKAN_SANITIZER_MAX_FLOPS if session.backend == "hlsl" else SANITIZER_MAX_FLOPS) else None)
        sanitize_at = next((s for s in sizes_list if min(s.values()) >= 16), fallback)
    unchecked = Generality(passed=None, sizes_checked=[], failures=[], constraints=constraints,
                           note=f"no sampled size meets the constraints {constraints}: generality is unchecked"
                           if problem.symbols else "the problem's shapes are fixed (no size symbols): no other "
                           "sizes to check")
    started = time.perf_counter()
    spec = ctx.spec(session, source)
    if params:
        spec = spec.bind(params)
    # Sizes too big to run, where a launch line still has to fit the device (a 1-D dispatch of ROWS groups passed
    # every sampled size and broke the 65,535-group limit at ROWS=70,000): its expressions evaluated, nothing run.
    beyond = launch_breach(spec, largest_sizes(problem, session.sizes, constraints), groups=_group_limits(ctx, session))
    if not sizes_list and sanitize_at is None:
        if beyond is None:
            return unchecked, None
        return Generality(passed=False, sizes_checked=[beyond.sizes], failures=[beyond], constraints=constraints,
                          note="no sampled size meets the constraints: only the launch line was checked, at the "
                          "largest sizes"), None  # type: ignore[list-item]
    found = _Found()
    pending, sanitized, compiled = list(sizes_list), None, True
    while True:
        heard = _Heard(progress)
        job = GeneralityJob(**ctx.wire(session), dtype=session.dtype, source=source, spec=spec,
                            sizes_list=pending, sanitize_sizes=sanitize_at,
                            sanitize_beside=ctx.settings.sanitizer_beside,
                            sanitizer_standby=ctx.settings.sanitizer_standby)
        try:
            result = ctx.run_job(session, job, heard, device=device)
        except JobFailed as exc:
            found.take(heard.verdicts)
            if not exc.stage.startswith("generality at "):  # e.g. during compute-sanitizer: no size to blame
                found.notes.append(f"the check stopped during '{exc.stage}': {exc}")
                break
            at = exc.stage.removeprefix("generality at ")
            stopped = named_sizes(at)
            judged = [s for s, *_ in heard.verdicts]
            found.stops.append(SizeFailure(sizes=at if stopped in judged else stopped, check=exc.kind,
                                           message=str(exc)))
            pending = [s for s in pending if s not in judged and s != stopped]
            if sanitize_at == stopped:  # the sanitizer would only stop there again
                sanitize_at = None
            # The sizes after the one that stopped the job are checked in a fresh worker, while the budget allows:
            # a wrong result at them is what the kernel must fix, whatever the stop was.
            if pending and exc.kind in DEVICE_FAULTS and len(found.stops) < MAX_STOPS and \
                    time.perf_counter() - started < ctx.settings.job_total_timeout_s:
                continue
            if pending:
                found.notes.append(f"the check stopped at {at.split(':')[0]}; {len(pending)} sampled sizes after it "
                                   "were not checked")
            break
        if result.generality is None:  # did not compile
            compiled = False
        else:
            found.checked += result.generality.sizes_checked
            found.failures += result.generality.failures
            found.notes += [result.generality.note] if result.generality.note else []
        sanitized = result.sanitizer
        break
    generality = found.generality() if compiled else Generality()
    if not sizes_list:
        generality = unchecked
    if beyond is not None and compiled:  # after the sampled sizes' failures: a wrong result there leads
        generality.failures.append(beyond)
        generality.sizes_checked.append(beyond.sizes)  # type: ignore[arg-type]
        generality.passed = False
    generality.seconds = round(time.perf_counter() - started, 3)
    if constraints:
        generality.constraints = constraints
    return generality, sanitized


def _group_limits(ctx: LoopContext, session: SessionRow) -> list[int] | None:
    """The Vulkan device's maxComputeWorkGroupCount (an HLSL session's), where the device reported it; None: the
    portable 65,535 per dimension."""
    if session.backend != "hlsl" or session.device_index < 0:
        return None
    limits = ctx.device_of(session).prop("max_compute_workgroup_count")
    return [int(n) for n in limits] if isinstance(limits, list) and len(limits) == 3 else None


MAX_STOPS = 2  # sampled sizes that may end the job (a hang, a crash) before the rest are given up: each costs a wait


class _Heard:
    """The job's progress, passed on, with the verdict each size reported as it finished (size_note)."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.verdicts: list[tuple[dict[str, int], str, str | None]] = []

    def __call__(self, line: str) -> None:
        note = read_size_note(line)
        if note is not None:
            self.verdicts.append(note)
        self.progress(line)


class _Found:
    """What the generality jobs of one version found, over the workers a hang or crash at one size ended."""

    def __init__(self) -> None:
        self.checked: list[dict[str, int]] = []
        self.failures: list[SizeFailure] = []
        self.stops: list[SizeFailure] = []  # the sizes that ended a job: judged after every finished size's verdict
        self.unjudged: list[str] = []
        self.notes: list[str] = []

    def take(self, verdicts: list[tuple[dict[str, int], str, str | None]]) -> None:
        """The verdicts a job reported before it was stopped (cleaned: a worker's text, as cleaned_result does)."""
        for sizes, check, message in verdicts:
            if check == UNJUDGED:
                self.unjudged.append(clean(message or "", WORKER_TEXT_CHARS))
                continue
            self.checked.append(sizes)
            if check != PASSED:
                self.failures.append(SizeFailure(sizes=sizes, check=check,
                                                 message=clean(message, WORKER_TEXT_CHARS) if message else None))

    def generality(self) -> Generality:
        notes = list(self.notes)
        if self.unjudged:
            notes.insert(0, f"not checked at {len(self.unjudged)} sampled sizes where the reference kernel fails: "
                            f"{self.unjudged[0]}")
        failures = self.failures + self.stops
        passed = False if failures else (True if self.checked else None)
        return Generality(passed=passed, sizes_checked=self.checked, failures=failures,
                          note="; ".join(notes) or None)

