"""A submission that reads slower than its parent beyond noise against the parent's recorded figure: the parent is
timed again right after it, on the session's device, at the configuration its figure is of (the same sizes, inputs
and rules as benchmark), and the pair is judged and kept (records.Retimed, beside the child): only this child's
comparisons with the parent read that re-timing. An agent's v3 was called "0.518x its parent (slower beyond noise)"
against v2's lucky 3.611 ms; timed back to back, v2 took 6.906 ms and v3 6.938 ms. A faster or within-noise verdict
is not re-timed: the round trip costs a timing."""

from __future__ import annotations

import time

from peak_mcp.evaluation.noise import SLOWER, change
from peak_mcp.loop.context import LoopContext, Progress
from peak_mcp.loop.pipeline.evaluate import evaluate
from peak_mcp.store.records import Outcome, Retimed, SessionRow


def retime_parent(ctx: LoopContext, session: SessionRow, number: int, parent: int | None, outcome: Outcome,
                  progress: Progress) -> None:
    """Re-time `parent` beside version `number` where `outcome` reads slower than the parent's record."""
    if parent is None or not (outcome.status.passed and outcome.timing and outcome.timing.median_ms):
        return
    row = ctx.store.version(session.id, parent)
    figure = row.timing
    if figure is None or not figure.median_ms or change(outcome.timing, figure) != SLOWER:
        return
    progress(f"v{number} reads slower than v{parent}'s recorded {figure.median_ms:.4g} ms: timing v{parent} again, "
             "back to back")
    again = evaluate(ctx, session, row.source, progress, params=figure.params, vendor_ms=session.vendor_ms)
    if not (again.status.passed and again.timing):
        said = f"v{parent}'s re-timing back to back failed ({again.failure}): the verdict reads its record"
        progress(said)
        # in the answer too: a parent that no longer passes is news, and a progress line may never be read
        why = (again.message or "").splitlines()[0][:200] if again.message else ""
        outcome.message = f"{outcome.message or ''}; {said}" + (f" ({why})" if why else "")
        return
    retimed = Retimed(timing=again.timing.configured_as(figure), at=time.time(),
                      by=f"submit_kernel of v{number}, back to back", beside=number)
    ctx.store.update_version(session.id, parent, retimed=retimed.model_dump(mode="json"))
