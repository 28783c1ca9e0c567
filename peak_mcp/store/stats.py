"""get_transformation_stats: per transformation, what its attempts came to across the recorded sessions (PEAK's
research data): attempts, successes beyond timing noise, within-noise results and slowdowns apart, first-try
success, failure kinds, speedups over the parent."""

from __future__ import annotations

from collections import Counter, defaultdict
from statistics import median
from typing import Any

from peak_mcp.evaluation.noise import FASTER, NOISE, SLOWER, change
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
    apart, as what they are. `session_id`: that session's attempts only; None: every session in the data dir."""
    runs = [r for r in store.apply_runs() if session_id is None or r.session_id == session_id]
    versions = [v for v in store.all_versions() if session_id is None or v.session_id == session_id]
    by_key = {(v.session_id, v.number): v for v in versions}
    grouped: dict[str, list[VersionRow]] = defaultdict(list)
    for v in versions:
        if v.transformation:
            grouped[v.transformation].append(v)

    def verdict(v: VersionRow) -> str | None:
        """FASTER, SLOWER or NOISE against its parent, for a passing (general) version timed beside one."""
        parent = by_key.get((v.session_id, v.parent))
        if not (v.status.passed and v.timing and parent and parent.timing):
            return None
        return change(v.timing, parent.timing)

    out = []
    for name, attempts in sorted(grouped.items()):
        runs_for = [r for r in runs if r.transformation == name and r.attempts > 0]
        applied = [v for v in attempts if v.status.passed]
        verdicts = Counter(verdict(v) for v in applied)
        speedups = [by_key[(v.session_id, v.parent)].timing.median_ms / v.timing.median_ms  # type: ignore
                    for v in applied if verdict(v) is not None]
        first = {v.apply_id: v for v in attempts if v.apply_id and v.attempt == 1}
        result = {(r.session_id, r.result_version): r for r in runs_for if r.result_version is not None}
        out.append({
            "transformation": name, "attempts": len(attempts), "runs": len(runs_for),
            "applied": len(applied),  # general and passed, whatever the speed
            "compiled_only": sum(v.status is Status.COMPILED for v in attempts),  # nothing ran: no verdict
            "successes": verdicts[FASTER], "within_noise": verdicts[NOISE], "slowdowns": verdicts[SLOWER],
            "success_rate": verdicts[FASTER] / len(attempts),
            "first_try_success_rate": (sum(r.id in first and verdict(first[r.id]) == FASTER for r in runs_for)
                                       / len(runs_for)) if runs_for else None,
            "runs_succeeded": sum(verdict(by_key[key]) == FASTER for key in result if key in by_key),
            "failure_kinds": dict(Counter(v.failure for v in attempts if v.failure)),
            "median_speedup_vs_parent": median(speedups) if speedups else None,
            "best_speedup_vs_parent": max(speedups) if speedups else None,
        })
    return out
