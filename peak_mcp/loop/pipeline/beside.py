"""Generality and the sanitizer on an idle twin device while the session's own device validates and times.

A submission's phases ran one after another on the session's device: compile, validate, time, then the other sizes
and the sanitizer (on an H200, 1.3 s of timing and 2.3 s of sanitizer for a 4096^3 matmul). Where another device of
the same model has nothing queued (the devices a tune would fan out to), the second half starts there at once and
the verdict waits for whichever ends last. Nothing timed shares a device: the twin runs no timing, and a twin with
work queued is not taken. Without a twin the checks run after timing on the session's own device, as before.
"""

from __future__ import annotations

import contextvars
import threading

from peak_mcp.loop.context import LoopContext, Progress
from peak_mcp.loop.pipeline.generality import Checked, sizes_and_sanitizer
from peak_mcp.loop.timeline import Recorder
from peak_mcp.runner.pool import CANCEL
from peak_mcp.store.records import SessionRow

RELAY_S = 2.0


class Beside:
    """The checks of one source at work on a twin; `result()` waits for them. Where the version fails before they
    matter, nobody waits: the job ends on its own (stopping it would restart the twin's worker and drop the
    references it keeps), and the twin, busy meanwhile, is not taken by the next submission."""

    def __init__(self, ctx: LoopContext, session: SessionRow, source: str, params: dict[str, int] | None,
                 device: int, timeline: Recorder | None) -> None:
        self.device = device
        # its own steps, on the submission's clock: they overlap the main ones (quiet: a client's progress is
        # relayed from the request's thread only)
        self.timeline = Recorder(lambda _: None, started=timeline.started if timeline else None)
        if timeline is not None:
            timeline.beside(self.timeline, f"device {device}")
        self._stop = threading.Event()
        self._found: Checked | None = None
        self._error: BaseException | None = None
        request = CANCEL.get()

        def run() -> None:
            CANCEL.set(self._stop)  # set when the request is cancelled (_watch)
            try:
                self._found = sizes_and_sanitizer(ctx, session, source, self.timeline, params, device=device)
            except BaseException as exc:  # handed to result(): the thread itself never raises
                self._error = exc
            self.timeline("ended")  # where its last step ends on the shared clock

        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(run,),
                                        name=f"beside-{device}", daemon=True)
        self._thread.start()
        if request is not None:  # a cancelled request stops the twin's job too
            threading.Thread(target=self._watch, args=(request,), name=f"beside-cancel-{device}",
                             daemon=True).start()

    @classmethod
    def start(cls, ctx: LoopContext, session: SessionRow, source: str, params: dict[str, int] | None,
              timeline: Recorder | None = None) -> Beside | None:
        """The checks started on the first idle twin of the session's device, or None where there is none.
        `timeline`: the submission's, which then shows the twin's steps beside its own."""
        if not ctx.settings.generality_beside or session.device_index < 0:
            return None
        twins = ctx.devices.tuning_devices(session)[1:]
        return cls(ctx, session, source, params, twins[0], timeline) if twins else None

    def result(self, progress: Progress) -> Checked:
        """What the twin found, once it ends; meanwhile its latest step is relayed every RELAY_S (a client
        that hears nothing may give up on the call)."""
        if self._thread.is_alive():
            progress(f"waiting for generality and the sanitizer on device {self.device}")
        said = None
        while self._thread.is_alive():
            self._thread.join(RELAY_S)
            step = self.timeline.steps[-1][1] if self.timeline.steps else None
            if step is not None and step != said and step != "ended":
                progress(step)
                said = step
        if self._error is not None:
            raise self._error
        assert self._found is not None
        return self._found

    def _watch(self, request: threading.Event) -> None:
        while self._thread.is_alive():
            if request.wait(0.5):
                self._stop.set()
                return
