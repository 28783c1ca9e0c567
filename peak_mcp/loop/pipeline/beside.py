"""Generality and the sanitizer on an idle twin device while the session's own device times the version.

A submission's phases ran one after another on the session's device: compile, validate, time, then the other sizes
and the sanitizer (on an H200, 1.3 s of timing and 2.3 s of sanitizer for a 4096^3 matmul). Where another device of
the same model has nothing queued (the devices a tune would fan out to), the second half starts there as soon as the
version has passed at the session's sizes (its timing's first line), and the verdict waits for both. Nothing timed
shares a device: the twin runs no timing, a twin with work queued is not taken, and a twin one submission holds is
not taken by another. Without a twin the checks run after timing on the session's own device, as before.

A twin's answer is taken only where it is a verdict on the kernel at each size. Where the twin's job stopped without
one (its worker died or never started, a size crashed or hung it) the checks run again on the session's own device,
which judges; a twin whose fault the session's device does not repeat is not taken again by this server.
"""

from __future__ import annotations

import contextvars
import threading
from collections import Counter

import structlog

from peak_mcp.evaluation.phases import Generality
from peak_mcp.loop.context import LoopContext, Progress
from peak_mcp.loop.pipeline.generality import DEVICE_FAULTS, Checked, sizes_and_sanitizer
from peak_mcp.loop.timeline import Recorder, phase_of
from peak_mcp.runner.pool import CANCEL
from peak_mcp.store.records import SessionRow

log = structlog.get_logger("peak_mcp.loop.beside")
RELAY_S = 2.0
LABEL = "beside"  # the twin's phases in a timeline: 'generality (beside)'; its steps name the device



class Beside:
    """The checks of one source at work on a twin; `result()` waits for them and judges whether they stand."""

    def __init__(self, ctx: LoopContext, session: SessionRow, source: str, params: dict[str, int] | None,
                 device: int, timeline: Recorder | None) -> None:
        self.ctx, self.session, self.source, self.params = ctx, session, source, params
        self.device = device
        # its own steps on the submission's clock (they overlap the main ones); a client hears them relayed from
        # the request's thread, not twice in the timeline
        self.timeline = Recorder(lambda _: None, started=timeline.started if timeline else None)
        self.timeline(f"checks on device {device}")
        self._relay = timeline.progress if timeline is not None else None
        if timeline is not None:
            timeline.beside(self.timeline, LABEL)
        self._stop = threading.Event()
        self._found: Checked | None = None
        self._error: BaseException | None = None
        request = CANCEL.get()

        def run() -> None:
            CANCEL.set(self._stop)  # set by a cancelled request (_watch) or a verdict that no longer needs it
            try:
                self._found = sizes_and_sanitizer(ctx, session, source, self.timeline, params, device=device)
            except BaseException as exc:  # handed to result(): the thread itself never raises
                self._error = exc
                log.warning("checks beside stopped", device=device, error=f"{type(exc).__name__}: {exc}")
            finally:
                self.timeline("ended")  # where its last step ends on the shared clock
                ctx.devices.twins.release(session.backend, device)

        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(run,),
                                        name=f"beside-{device}", daemon=True)
        self._thread.start()
        if request is not None:
            threading.Thread(target=self._watch, args=(request,), name=f"beside-cancel-{device}",
                             daemon=True).start()

    @classmethod
    def start(cls, ctx: LoopContext, session: SessionRow, source: str, params: dict[str, int] | None,
              timeline: Recorder | None = None) -> Beside | None:
        """The checks started on an idle twin of the session's device, or None where there is none. Among the
        idle twins, the one fewest sessions call home (another session's own device is its to time on); it is
        held until its job ends. `timeline`: the submission's, which then shows the twin's steps apart."""
        if not ctx.settings.generality_beside or session.device_index < 0:
            return None
        idle = ctx.devices.tuning_devices(session)[1:]
        if not idle:
            return None
        homes = Counter(s.device_index for s in ctx.store.sessions() if s.backend == session.backend)
        device = ctx.devices.twins.take(session.backend, idle, homes)
        return None if device is None else cls(ctx, session, source, params, device, timeline)

    def result(self, progress: Progress) -> Checked:
        """What the twin found, once it ends, where it is a verdict on the kernel; else the checks run again on
        the session's own device. Meanwhile the twin's latest step is relayed every RELAY_S (a client that hears
        nothing may give up on the call)."""
        relay = self._relay or progress
        if self._thread.is_alive():
            progress(f"waiting on device {self.device} for the other sizes and the sanitizer")
        said = None
        while self._thread.is_alive():
            self._thread.join(RELAY_S)
            step = self.timeline.steps[-1][1] if self.timeline.steps else None
            if step is not None and step != said and step != "ended":
                relay(step)
                said = step
        if self._found is not None and _judged(self._found[0]):
            return self._found
        why = f"{type(self._error).__name__}" if self._error is not None else "no verdict at every size"
        progress(f"generality: device {self.device} gave {why}; checking again on the session's device")
        own = sizes_and_sanitizer(self.ctx, self.session, self.source, progress, self.params)
        if _judged(own[0]):  # the session's device judged where the twin could not: the twin is suspect
            self.ctx.devices.twins.set_aside(self.session.backend, self.device)
            log.warning("twin device set aside", backend=self.session.backend, device=self.device, why=why)
        return own

    def abandon(self) -> None:
        """The verdict will not use the checks (the version failed after its timing began): stop the twin's job."""
        self._stop.set()

    def _watch(self, request: threading.Event) -> None:
        while self._thread.is_alive():
            if request.wait(0.5):
                self._stop.set()
                return


def _judged(generality: Generality) -> bool:
    """A verdict at every sampled size: no size stopped the job by crashing or hanging it, and the job did not end
    before it judged (a worker that died or never started leaves `passed` unset or a note that it stopped)."""
    stopped = any(f.check in DEVICE_FAULTS for f in generality.failures)
    unfinished = generality.passed is None and bool(generality.note and "stopped" in generality.note)
    return not stopped and not unfinished


class Starter:
    """A Progress for the evaluation that starts the checks beside once the version has passed at the session's
    sizes: its timing's first line (a version wrong there never needs them)."""

    def __init__(self, ctx: LoopContext, session: SessionRow, source: str, params: dict[str, int] | None,
                 progress: Progress, timeline: Recorder | None = None) -> None:
        self.ctx, self.session, self.source, self.params = ctx, session, source, params
        self.progress, self.timeline = progress, timeline
        self.beside: Beside | None = None
        self._asked = False

    def __call__(self, line: str) -> None:
        self.progress(line)
        if not self._asked and phase_of(line) == "benchmark":
            self._asked = True
            self.beside = Beside.start(self.ctx, self.session, self.source, self.params, self.timeline)

    def checked(self, passed: bool, progress: Progress) -> Checked | None:
        """The twin's checks where the version passed (None: run them on the session's device); else the twin's
        job is stopped."""
        if self.beside is None:
            return None
        if not passed:
            self.beside.abandon()
            return None
        return self.beside.result(progress)
