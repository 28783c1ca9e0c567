"""A session's device prepares its checks in the background, before its first submission and between submissions
(issue 35).

The first submission of a session waited 30-40 s on an H200 for work no kernel caused (runner/prepare_job.py says
what). The agent is writing that kernel meanwhile, so the server starts the work when the session starts; the
submission then finds it done, or waits on the device behind it and is told so. Only where the session's device is a
GPU by default (Settings.prepare_ahead): on a CPU device the same work would compete with the agent's other jobs for
the same cores. After each submission the same job, without the sets kept already, draws what the next one will
draw afresh: the size generality draws at random and the fresh sets (reference_cache.SpareSets).
"""

from __future__ import annotations

import random
import threading
import time

import structlog

from peak_mcp.evaluation.generality import sample_sizes
from peak_mcp.loop.context import LoopContext
from peak_mcp.loop.pipeline.generality import sanitizer_runs
from peak_mcp.runner.messages import PrepareJob
from peak_mcp.runner.pool import CANCEL, JobFailed
from peak_mcp.store.records import SessionRow

log = structlog.get_logger("peak_mcp.loop.pipeline.prepare")


def wanted(ctx: LoopContext, session: SessionRow) -> bool:
    """Whether this session's checks are prepared ahead: a device that runs kernels, a problem with a Python
    reference (a reference kernel's session has its v0 run already), and the setting."""
    setting = ctx.settings.prepare_ahead
    if setting == "never" or session.device_index < 0 or ctx.problem(session.problem).needs_reference_kernel:
        return False
    return setting == "always" or not ctx.device_of(session).is_cpu


def prepare_job(ctx: LoopContext, session: SessionRow, *, first: bool = True,
                revalidates: bool | None = None) -> PrepareJob:
    """What the session's next submission will ask for: the kept sets at its sizes (`first`: later ones find them
    kept already), one at each of generality's sampled sizes, the size drawn at random included (its seed drawn
    now and kept for that check: LoopContext.next_draw), the fresh sets it draws (`revalidates`: a validation on
    fresh inputs is expected; default, where the session has a vendor library), and the sanitizer's targets where
    its sanitizer run would take them (compute-sanitizer: CUDA, and HIP on NVIDIA)."""
    problem = ctx.problem(session.problem)
    sizes_list = sample_sizes(problem, session.sizes, session.constraints or [],
                              draw=random.Random(ctx.next_draw(session.id)))
    # standby targets are compute-sanitizer's (runner/sanitizer.py): HLSL's validation layer has none
    standby = first and ctx.settings.sanitizer_standby and session.backend != "hlsl" and sanitizer_runs(ctx, session)
    return PrepareJob(**ctx.wire(session), dtype=session.dtype, sizes=session.sizes,
                      trials=ctx.settings.validation_trials, keep_sets=first, sizes_list=sizes_list,
                      sanitizer_standby=standby, spare_fresh=True,
                      spare_revalidation=session.vendor_ms is not None if revalidates is None else revalidates)


IDLE_S = 1.0  # after a submission, how often the job looks for an idle device before drawing the next one's sets
GIVE_UP = ("problem_error", "timeout")  # a prepare job that ended so: the same file's code is not prepared again


class Preparer:
    """The session prepare jobs of one server: each in a background thread, stopped when the server closes. A job
    after a submission polls the device every IDLE_S and starts when nothing waits or runs there (an agent
    resubmitting at once, a script, another session's job: they go first, and a later submission's job replaces
    it); once started it runs to its end. A problem file whose prepare job failed in its own code or hung is not
    prepared again by this server (its submissions would meet the same code twice)."""

    def __init__(self, ctx: LoopContext) -> None:
        self.ctx = ctx
        self.threads: list[threading.Thread] = []  # every job's, alive or ended since the last start
        self.latest: dict[str, threading.Thread] = {}  # by session: its latest job's thread
        self.given_up: set[tuple[str, str | None]] = set()  # (problem, file sha256) whose prepare job failed
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def start(self, session: SessionRow, *, first: bool = True,
              revalidates: bool | None = None) -> threading.Thread | None:
        """Run the session's prepare job (prepare_job) in a background thread (returned, for tests to join); None
        where not wanted. Never raises, nor does the thread: a failure here is met, and reported, by a submission."""
        ctx = self.ctx
        try:
            given_up_key = (session.problem, session.problem_sha256)
            if self._stop.is_set() or given_up_key in self.given_up or not wanted(ctx, session):
                return None
            job = prepare_job(ctx, session, first=first, revalidates=revalidates)
        except Exception as exc:  # a problem that cannot say its sizes now: the submission will say why
            log.info("session not prepared ahead", session=session.id, reason=str(exc)[:200])
            return None

        def idle() -> bool:
            if first:
                return True
            while not self._stop.wait(IDLE_S):
                if self.latest.get(session.id) is not threading.current_thread():
                    return False  # a later submission of the session has its own job
                if ctx.pool.queue_length(session.backend, session.device_index) == 0:
                    return True
            return False

        def run() -> None:
            CANCEL.set(self._stop)  # the server closing stops the job, or its wait for the device
            try:
                if not idle():
                    return
                result = ctx.run_job(session, job, lambda _line: None)
                log.info("session prepared ahead", session=session.id, made=result.made, seconds=result.seconds,
                         skipped=result.skipped[:3])
            except JobFailed as exc:  # the server closing, a hang or crash: the submission meets it on its own
                if exc.kind in GIVE_UP:
                    self.given_up.add(given_up_key)
                log.info("preparing the session ahead stopped", session=session.id, kind=exc.kind,
                         reason=str(exc)[:200])
            except Exception as exc:
                log.info("preparing the session ahead stopped", session=session.id, reason=str(exc)[:200])

        thread = threading.Thread(target=run, name=f"prepare-{session.id}", daemon=True)
        with self._lock:
            if self._stop.is_set():
                return None
            self.threads = [t for t in self.threads if t.is_alive()] + [thread]
            self.latest[session.id] = thread
        thread.start()
        return thread

    def close(self, within_s: float = 15.0) -> None:
        """Stop every job and wait for the threads, `within_s` in all (each ends within its job's cancel poll)."""
        with self._lock:
            self._stop.set()
            threads = list(self.threads)
        ends = time.monotonic() + within_s
        for thread in threads:
            thread.join(timeout=max(0.0, ends - time.monotonic()))
