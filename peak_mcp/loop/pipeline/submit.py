"""A submitted kernel, top to bottom: admit (admit.py) -> record pending (record.py) -> configuration
(configuration.py) -> compile, validate, benchmark and their verdict (evaluate.py, verdicts.py; the parent timed
again where the version reads slower than its record, parent_retime.py) -> generality and
the sanitizer (generality.py; on an idle twin device at the same time as the evaluation where there is one,
beside.py) -> the message's notes (notes.py) -> record the verdict and move head (record.py) -> the report
(loop/versions.py)."""

from __future__ import annotations

import time

import structlog

from peak_mcp.core.errors import InvalidInput
from peak_mcp.loop.context import LoopContext, Progress, quiet
from peak_mcp.loop.models import Submission
from peak_mcp.loop.pipeline import notes, prepare, record
from peak_mcp.loop.pipeline.admit import admit
from peak_mcp.loop.pipeline.beside import Starter
from peak_mcp.loop.pipeline.configuration import configuration
from peak_mcp.loop.pipeline.evaluate import evaluate
from peak_mcp.loop.pipeline.generality import with_generality
from peak_mcp.loop.pipeline.parent_retime import retime_parent
from peak_mcp.loop.timeline import Recorder
from peak_mcp.loop.versions import Versions
from peak_mcp.store.records import SessionRow

log = structlog.get_logger("peak_mcp.loop.service")


class Pipeline:
    def __init__(self, ctx: LoopContext, versions: Versions) -> None:
        self.ctx, self.versions = ctx, versions
        self.preparer = prepare.Preparer(ctx)  # sessions' checks prepared in the background

    def prepare_ahead(self, session: SessionRow, *, first: bool = True, revalidates: bool | None = None) -> bool:
        """Start the session's prepare job in the background (prepare.py), where it is wanted; whether it started."""
        return self.preparer.start(session, first=first, revalidates=revalidates) is not None

    def close(self) -> None:
        self.preparer.close()

    def submit_kernel(self, session_id: str, source: str, parent: int | None = None,
                      transformation: str | None = None, progress: Progress = quiet, *,
                      apply_id: str | None = None, attempt: int | None = None,
                      require_generality: bool = True) -> Submission:
        session = self.ctx.store.session(session_id)
        if parent is None:
            parent = session.head
        elif isinstance(parent, bool) or not isinstance(parent, int) or parent < 0:
            raise InvalidInput(f"parent={parent!r} is not a version number", "omit parent to derive from head, or "
                               "pass a version number from history (0 or more).")
        else:
            self.ctx.store.version(session_id, parent)  # raises NotFound with a hint
        origin = "apply" if apply_id else "submit"
        return self.submit(session_id, source, parent=parent, origin=origin, transformation=transformation,
                           progress=progress, apply_id=apply_id, attempt=attempt,
                           require_generality=require_generality)

    def submit(self, session_id: str, source: str, *, parent: int | None, origin: str,
               transformation: str | None, progress: Progress, apply_id: str | None = None,
               attempt: int | None = None, require_generality: bool = True) -> Submission:
        started = time.perf_counter()
        progress = Recorder(progress)  # the timeline of this submission, stored with its verdict
        store = self.ctx.store
        session = store.session(session_id)
        admit(source)
        number = record.pending(store, session_id, source, parent=parent, origin=origin,
                                transformation=transformation, apply_id=apply_id, attempt=attempt)
        # A child whose parameters take its parent's tuned configuration starts from it, so that its time compares
        # with the parent's tuned one; otherwise each list's first value.
        config = configuration(self.ctx, session, source, parent)
        beside = Starter(self.ctx, session, source, config.params, progress, timeline=progress)
        outcome = evaluate(self.ctx, session, source, beside, vendor_ms=session.vendor_ms, params=config.params)
        outcome = notes.at_configuration(outcome, config, parent)
        if outcome.status.passed:  # stored before the parent's re-timing, which can last until a hang's timeout
            record.measured(store, session_id, number, outcome)
        # read slower than the parent's record: the parent timed again now, so the verdict compares one moment
        retime_parent(self.ctx, session, number, parent, outcome, progress)
        checked = beside.checked(outcome.status.passed, progress)
        if outcome.status.passed:
            outcome = with_generality(self.ctx, session, source, outcome, progress, config.params, checked=checked)
        outcome = notes.judged(outcome, session, self.ctx.problem(session.problem), origin=origin,
                               require_generality=require_generality)
        record.final(store, session, number, outcome, require_generality=require_generality)
        store.update_version(session_id, number, timeline=progress.timeline().model_dump(mode="json"))
        report = Submission(**dict(self.versions.version_report(session_id, number)),
                            note=self.versions.standing_note(session_id, number))
        report.seconds = time.perf_counter() - started
        log.info("version recorded", session=session_id, version=number, status=report.status,
                 seconds=round(report.seconds, 3))
        # what the next submission draws afresh, drawn while the agent reads this report: the fresh inputs of a
        # version faster than the vendor library where this one was (runner/jobs.py), generality's drawn size
        faster = outcome.timing is not None and bool(session.vendor_ms) and \
            outcome.timing.median_ms < (session.vendor_ms or 0.0)
        self.prepare_ahead(session, first=False, revalidates=faster)
        return report
