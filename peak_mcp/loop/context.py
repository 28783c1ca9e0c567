"""What every part of the loop shares: the settings, the store, the device pool, the problems and the devices; and
what each part asks of them about a session (its problem, its device, a source's annotation checked for it, what
its jobs carry, a job run with the worker's text cleaned, its roofline)."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, overload

from peak_mcp.backends.registry import launch_spec
from peak_mcp.core.config import Settings
from peak_mcp.core.devices import Device
from peak_mcp.core.errors import InvalidInput, NotFound, PeakError
from peak_mcp.core.launch import LaunchSpec
from peak_mcp.core.text_safety import clean
from peak_mcp.evaluation.kernel_reference import ReferenceKernel
from peak_mcp.evaluation.phases import Baseline
from peak_mcp.loop.devices import Devices
from peak_mcp.loop.pipeline.verdicts import no_vendor_reason
from peak_mcp.problems.base import Problem
from peak_mcp.problems.registry import ProblemRegistry
from peak_mcp.runner.messages import EvaluateJob, GeneralityJob, Job, PrepareJob, ProfileJob, TuneJob
from peak_mcp.runner.pool import DevicePool, JobFailed
from peak_mcp.runner.replies import (
    EvaluateResult,
    GeneralityResult,
    JobResult,
    PrepareResult,
    ProfileResult,
    TuneResult,
)
from peak_mcp.store.database import Store
from peak_mcp.store.records import SessionRow
from peak_mcp.store.reports import roofline_ms

if TYPE_CHECKING:
    from peak_mcp.runner.ray_pool import RayDevicePool

Progress = Callable[[str], None]
# A worker's error (Failed.error: a problem file's exception among them) and the messages of a generality or tune
# result, as the server keeps and returns them: no terminal control, bounded.
WORKER_TEXT_CHARS = 4000


def quiet(_: str) -> None:
    """A Progress that says nothing."""


def cleaned_failure(exc: JobFailed) -> JobFailed:
    """`exc` with its message and hint cleaned (text_safety.clean): a problem_error quotes the problem file's own
    exception message, and a worker's reply is not trusted to be printable or short."""
    exc.message = clean(exc.message, WORKER_TEXT_CHARS)
    exc.hint = clean(exc.hint, 1000) if exc.hint else exc.hint
    exc.args = (exc.message,)
    return exc


def cleaned_result(result: JobResult) -> JobResult:
    """The texts of a worker's result that may quote problem code (a problem_error at a sampled size, a tune
    configuration that failed with one), cleaned as cleaned_failure does."""
    if isinstance(result, GeneralityResult) and result.generality is not None:
        for failure in result.generality.failures:
            if failure.message:
                failure.message = clean(failure.message, WORKER_TEXT_CHARS)
        if result.generality.note:
            result.generality.note = clean(result.generality.note, WORKER_TEXT_CHARS)
    elif isinstance(result, TuneResult):
        for config in result.results:
            if config.reason and config.kind in ("error", "validation"):
                config.reason = clean(config.reason, WORKER_TEXT_CHARS)
    return result


class LoopContext:
    def __init__(self, settings: Settings, store: Store, pool: DevicePool | RayDevicePool, problems: ProblemRegistry,
                 devices: Devices) -> None:
        self.settings, self.store, self.pool, self.problems, self.devices = settings, store, pool, problems, devices
        self._draws: dict[str, int] = {}  # by session: the seed of its next check's drawn size (next_draw)

    def next_draw(self, session_id: str) -> int:
        """The seed of the size drawn at random for the session's next generality check (sample_sizes' `draw`):
        from the OS, drawn now and kept until that check takes it, so that a prepare job can draw the size's input
        set before it (pipeline/prepare.py). Never said to the agent before the check that uses it."""
        return self._draws.setdefault(session_id, secrets.randbits(64))

    def take_draw(self, session_id: str) -> int:
        """The seed next_draw kept for this check (forgotten now), or a fresh one."""
        seed = self._draws.pop(session_id, None)
        return seed if seed is not None else secrets.randbits(64)

    def problem(self, name: str) -> Problem:
        """The problem a session names (NotFound, with the file's error where one failed to load)."""
        return self.problems.get(name)

    def device_of(self, session: SessionRow) -> Device:
        return self.devices.device_of(session)

    def spec(self, session: SessionRow, source: str) -> LaunchSpec:
        """The source's annotation, checked against what the session's backend needs and its problem's sizes, with
        SM_COUNT bound to the session's device."""
        problem = self.problem(session.problem)
        spec = launch_spec(source, session.backend, problem.symbols, problem.derived)
        return spec.on_device(self.device_of(session).sm_count)

    def wire(self, session: SessionRow) -> dict[str, Any]:
        """What every job for this session carries to name its problem (see Problem.wire), and for a problem without
        a Python reference the session's reference kernel (version 0), which the worker checks candidates against."""
        problem = self.problem(session.problem)
        # One seed per session: its submissions draw the same input sets, whose references the worker then keeps
        # (evaluation/reference_cache.py) instead of computing them again; a fresh set still checks a version faster
        # than the vendor library (runner/jobs.py), and the timed launches' audit changes inputs on every launch.
        wired = {**problem.wire(), "seed": session_seed(session.id)}
        if not problem.needs_reference_kernel:
            return wired
        try:
            v0 = self.store.version(session.id, 0)
        except NotFound:
            v0 = None
        if v0 is None or v0.origin != "reference":
            raise InvalidInput(f"session {session.id} of {problem.name} has no reference kernel",
                               f"{problem.name} has no Python reference: start a session with reference_kernel=SOURCE.")
        return {**wired, "reference_kernel": ReferenceKernel(source=v0.source, spec=self.spec(session, v0.source))}

    @overload
    def run_job(self, session: SessionRow, job: EvaluateJob, progress: Progress) -> EvaluateResult: ...

    @overload
    def run_job(self, session: SessionRow, job: GeneralityJob, progress: Progress, *,
                device: int | None = None) -> GeneralityResult: ...

    @overload
    def run_job(self, session: SessionRow, job: TuneJob, progress: Progress, *,
                device: int | None = None) -> TuneResult: ...

    @overload
    def run_job(self, session: SessionRow, job: PrepareJob, progress: Progress) -> PrepareResult: ...

    @overload
    def run_job(self, session: SessionRow, job: ProfileJob, progress: Progress, *, inactivity_s: float,
                total_s: float) -> ProfileResult: ...

    def run_job(self, session: SessionRow, job: Job, progress: Progress, *, inactivity_s: float | None = None,
                total_s: float | None = None, device: int | None = None) -> JobResult:
        """Run one job on the session's device (or `device`, a same-model helper a tune fans out to, or that
        checks generality beside the session's own); the pool
        answers with the result type of the job's type. Its error, or its result's messages, cleaned of terminal
        control and bounded (cleaned_failure)."""
        try:
            return cleaned_result(self.pool.run(session.backend, session.device_index if device is None else device,
                                                job,
                                                inactivity_s=inactivity_s or self.settings.inactivity_timeout_s,
                                                total_s=total_s or self.settings.job_total_timeout_s,
                                                progress=progress))
        except JobFailed as exc:
            cleaned_failure(exc)
            raise

    def roofline(self, session: SessionRow, sizes: dict[str, int],
                 baseline: Baseline | None = None) -> float | None:
        """The least time a launch of this session's problem can take at `sizes` on its device (reports.roofline_ms),
        with the copy bandwidth its worker measured where it did."""
        problem = self.problem(session.problem)
        try:
            flops, nbytes = problem.flops(sizes), problem.min_bytes(sizes, session.dtype)
        except PeakError:
            return None
        return roofline_ms(flops, nbytes, self.device_of(session), problem.peak_path(session.dtype, session.backend),
                           baseline or session.baseline)

    def yardstick_said(self, session: SessionRow, baseline: Baseline | None) -> Baseline | None:
        """A problem without a vendor library: what stands in for it is said from the server's view of the device
        (its profile's peak and bandwidth), which a worker's own facts lack."""
        problem = self.problem(session.problem)
        if baseline is None or problem.yardstick is not None:
            return baseline
        return baseline.model_copy(update={"reason": no_vendor_reason(problem.name, self.device_of(session))})


_SEED_SECRET = secrets.token_bytes(16)  # per server process: what a session's kept sets hold is not computable


def session_seed(session_id: str) -> int:
    """The seed of a session's input sets: fixed by its id within this server process, different between sessions,
    and not derivable from the id alone (a kernel that knew the kept sets' values could recognise them). The sets
    are kept in the workers' memory, which a restart clears anyway."""
    return int.from_bytes(hashlib.sha256(_SEED_SECRET + session_id.encode()).digest()[:4], "big") % 2**31
