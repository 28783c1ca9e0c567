"""get_transformation_stats: per transformation, what its attempts came to across the recorded sessions (PEAK's
research data): attempts, successes beyond timing noise, within-noise results and slowdowns apart, first-try
success, failure kinds, speedups over the parent."""

from __future__ import annotations

from collections import Counter, defaultdict
from statistics import median
from typing import Any

from peak_mcp.evaluation.noise import FASTER, NOISE, SLOWER, change
from peak_mcp.evaluation.phases import Timing
from peak_mcp.store.database import Store
from peak_mcp.store.records import Status, VersionRow


def scoped_statistics(store: Store, session_id: str | None = None) -> dict[str, Any]:
    """statistics() with what they cover: every session in this data directory, or one session (NotFound where
    it does not exist)."""
    sessions = [store.session(session_id)] if session_id is not None else store.sessions()
    ids = {s.id for s in sessions}
    stats = statistics(store, session_id)
    touched = {v.session_id for v in store.all_versions() if v.transformation and v.session_id in ids}
    if session_id is not None:
        scope = f"session {session_id} only ({sessions[0].problem} {sessions[0].backend} {sessions[0].dtype})"
    else:
        problems = sorted({s.problem for s in sessions if s.id in touched})
        backends = sorted({s.backend for s in sessions if s.id in touched})
        scope = (f"all {len(sessions)} sessions in this data dir, {len(touched)} with transformation attempts"
                 + (f" (problems {', '.join(problems)}; backends {', '.join(backends)})" if touched else "")
                 + "; pass session_id for one session")
    return {"transformations": stats, "scope": scope, "session_id": session_id, "sessions": len(sessions),
            "sessions_with_attempts": len(touched)}

def statistics(store: Store, session_id: str | None = None) -> list[dict[str, Any]]:
    """Per transformation: attempts, successes, first-try success, failure kinds, speedups (PEAK's research
    data). A success is a child that is general, passed, and faster than its parent beyond timing noise (the
    middle halves of the two timings do not overlap); passing children within noise or slower are counted
    apart, as what they are. The child's time is its text's as submitted, never one a later tune improved (tune's
    gain is reported apart: tuned_later, median_tune_speedup); the parent's is as it stood when the child came.
    `session_id`: that session's attempts only; None: every session in the data dir."""
    runs = [r for r in store.apply_runs() if session_id is None or r.session_id == session_id]
    versions = [v for v in store.all_versions() if session_id is None or v.session_id == session_id]
    by_key = {(v.session_id, v.number): v for v in versions}
    grouped: dict[str, list[VersionRow]] = defaultdict(list)
    for v in versions:
        if v.transformation:
            grouped[v.transformation].append(v)
    for r in runs:  # a run opened and never answered has no version, and is still an attempt at its text
        grouped.setdefault(r.transformation, [])
    by_session: dict[str, list[VersionRow]] = defaultdict(list)  # each session's passing versions, oldest first
    for v in sorted(versions, key=lambda v: v.created_at):
        if v.status.passed:
            by_session[v.session_id].append(v)

    def pair(v: VersionRow) -> tuple[Timing, Timing] | None:
        """Like with like: the version's time as its text produced it (before any tune of it) and its parent's as it
        stood when the version was recorded; None unless both are known for a passing (general) version."""
        parent = by_key.get((v.session_id, v.parent))
        if not (v.status.passed and parent):
            return None
        # the parent's re-timing where the version's submission took one back to back (records.Retimed): a lucky
        # 3.6 ms record of a parent made its child a 0.518x slowdown here, though back to back they were level
        own, theirs = v.submitted_timing, parent.beside(parent.timing_at(v.created_at), v.number)
        return (own, theirs) if own and theirs else None

    def best_before(v: VersionRow) -> Timing | None:
        """The fastest passing version of v's session recorded before v, at its time then: a parent can itself be
        slower than what the session had (an agent's 16.9x over a parent that was 0.30x of its own)."""
        before = [t for u in by_session[v.session_id] if u.created_at < v.created_at
                  and (t := u.timing_at(v.created_at)) is not None and t.median_ms]
        return min(before, key=lambda t: t.median_ms, default=None)

    def verdict(v: VersionRow) -> str | None:
        """FASTER, SLOWER or NOISE against its parent (pair)."""
        both = pair(v)
        return change(*both) if both else None

    def tune_gain(v: VersionRow) -> float | None:
        """Where a tune of the version took another configuration (a new full timing replaced its submitted one):
        submitted / tuned median, tune's gain. A tune that kept the version's own configuration (nothing to adopt,
        or its fastest no faster in full) took nothing: None, and it counts among the tuned, not the gains."""
        if not (v.status.passed and v.tuning and v.tuning.submitted and v.timing):
            return None
        if v.timing.params_from != "tuned" or v.timing.median_ms == v.tuning.submitted.median_ms:
            return None
        return v.tuning.submitted.median_ms / v.timing.median_ms

    out = []
    for name, attempts in sorted(grouped.items()):
        runs_for = [r for r in runs if r.transformation == name and r.attempts > 0]
        unanswered = [r for r in runs if r.transformation == name and r.attempts == 0]
        applied = [v for v in attempts if v.status.passed]
        verdicts = Counter(verdict(v) for v in applied)
        pairs = [both for both in map(pair, applied) if both]
        speedups = [theirs.median_ms / own.median_ms for own, theirs in pairs]
        over_best = [b.median_ms / both[0].median_ms for v in applied if (both := pair(v))
                     and (b := best_before(v)) is not None]
        tunes = [g for g in map(tune_gain, applied) if g is not None]
        first = {v.apply_id: v for v in attempts if v.apply_id and v.attempt == 1}
        result = {(r.session_id, r.result_version): r for r in runs_for if r.result_version is not None}
        out.append({
            "transformation": name, "attempts": len(attempts), "runs": len(runs_for),
            "applied": len(applied),  # general and passed, whatever the speed
            "compiled_only": sum(v.status is Status.COMPILED for v in attempts),  # nothing ran: no verdict
            "successes": verdicts[FASTER], "within_noise": verdicts[NOISE], "slowdowns": verdicts[SLOWER],
            "success_rate": verdicts[FASTER] / len(attempts) if attempts else 0.0,
            # runs opened and never answered (no submission): open, or closed without one
            "unanswered_runs": len(unanswered), "open_runs": sum(r.state == "open" for r in unanswered),
            "first_try_success_rate": (sum(r.id in first and verdict(first[r.id]) == FASTER for r in runs_for)
                                       / len(runs_for)) if runs_for else None,
            "runs_succeeded": sum(verdict(by_key[key]) == FASTER for key in result if key in by_key),
            "failure_kinds": dict(Counter(v.failure for v in attempts if v.failure)),
            "median_speedup_vs_parent": median(speedups) if speedups else None,
            "best_speedup_vs_parent": max(speedups) if speedups else None,
            # the same submitted times over the fastest version the session had before each (the parent or faster)
            "median_speedup_vs_best_before": median(over_best) if over_best else None,
            # versions a tune searched later (whatever it took), and those whose time a tune's configuration replaced,
            # with what that gained over their submitted times: tune's, not the text's
            "tuned_later": sum(v.tuning is not None for v in applied), "tune_adopted": len(tunes),
            "median_tune_speedup": median(tunes) if tunes else None,
            # passing versions whose submitted time a tune replaced before it was kept: no verdict on the text
            "submitted_time_unknown": sum(v.submitted_timing is None and v.timing is not None for v in applied),
        })
    return out
