"""Recording, the pipeline's bookends: a version is stored pending before anything runs, kept pending with what was
measured until generality has run (a server that dies meanwhile leaves it interrupted, never passed unchecked), and
stored with its verdict at the end, when head moves if the verdict allows."""

from __future__ import annotations

from peak_mcp.store.database import Store
from peak_mcp.store.records import Outcome, SessionRow, Status


def pending(store: Store, session_id: str, source: str, *, parent: int | None, origin: str,
            transformation: str | None, apply_id: str | None, attempt: int | None) -> int:
    """The new version's number, stored pending."""
    return store.add_version(session_id, parent=parent, origin=origin, transformation=transformation,
                             apply_id=apply_id, attempt=attempt, source=source, status=Status.PENDING)


def measured(store: Store, session_id: str, number: int, outcome: Outcome) -> None:
    """Everything measured so far, recorded with the version still pending."""
    store.update_version(session_id, number, **outcome.model_copy(update={"status": Status.PENDING}).columns())


def final(store: Store, session: SessionRow, number: int, outcome: Outcome, *, require_generality: bool) -> None:
    """The verdict recorded; head moved where it allows."""
    store.update_version(session.id, number, **outcome.columns())
    # Head moves only to versions validated and timed: one wrong at other sizes only when the agent accepts a
    # specialized kernel. Without a device nothing runs, and a version that only compiled (an empty kernel
    # compiles) proves nothing: head stays on v0, the starting point, and the note says why.
    status = outcome.status
    moves = session.runs and (status.passed or (status is Status.NOT_GENERAL and not require_generality))
    if moves or (number == 0 and status is Status.COMPILED and session.head is None):
        store.set_head(session.id, number)
