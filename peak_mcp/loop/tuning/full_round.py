"""The full timings that decide a tune: its candidates (the search's fastest; where the search's estimate of the
version's own configuration was far from that configuration's full time, the next fastest instead) and the
version's own configuration, timed in full one after another in one round on the session's device. The keep/adopt
verdict compares figures of one moment: an agent's tune kept v2's configuration because a fresh 6.4 ms lost to v2's
submit-time 3.6 ms, which re-ran at 6.7 ms right after; another's said "nothing to adopt" of a configuration the
search put 1.84x off its full time, and the next one, timed in full later, was 1.9x faster."""

from __future__ import annotations

from dataclasses import dataclass, field

from peak_mcp.evaluation.configs import Config, TuneReport
from peak_mcp.evaluation.phases import Timing
from peak_mcp.loop.context import LoopContext, Progress
from peak_mcp.loop.pipeline.beside import Starter
from peak_mcp.loop.pipeline.evaluate import evaluate
from peak_mcp.loop.pipeline.generality import with_generality
from peak_mcp.store.records import Outcome, SessionRow, VersionRow

FAR = 1.3  # the search's estimate of the own configuration this far (either way) from its full time: not trusted
RUNNERS_UP = 2  # at most this many other configurations timed in full then (each costs one full timing)


def candidates(report: TuneReport, own: dict[str, int], recorded: Timing | None,
               level: list[dict[str, int]]) -> list[dict[str, int]]:
    """The configurations to time in full against the version's own: the search's fastest where it is another;
    where it is the own one but its estimate is more than FAR from the own one's full time, the next fastest
    (those the re-timing could not order first); else none (nothing to adopt, nothing timed)."""
    best = report.best
    if best is None:
        return []
    if best.params != own or recorded is None or not recorded.median_ms:
        return [best.params]  # (a version never timed: its own configuration is the candidate, timed once)
    if not best.median_ms or max(best.median_ms / recorded.median_ms, recorded.median_ms / best.median_ms) <= FAR:
        return []
    ranked = [r.params for group in (report.retimed, report.results)
              for r in sorted((r for r in group if r.status == "ok" and r.median_ms is not None),
                              key=lambda r: r.median_ms or 0.0)]
    picked: list[dict[str, int]] = []
    for params in [*level, *ranked]:
        if params != own and params not in picked:
            picked.append(params)
    return picked[:RUNNERS_UP]


@dataclass
class Round:
    """What the round measured: each candidate's outcome in the order timed, the winner (the fastest that passed,
    checked at other sizes), and the own configuration's full timing (None where it failed: `own_failed` says
    why)."""

    timed: list[tuple[dict[str, int], Outcome]] = field(default_factory=list)
    winner: tuple[dict[str, int], Outcome] | None = None
    own: Timing | None = None
    own_failed: str | None = None


def full_round(ctx: LoopContext, session: SessionRow, v: VersionRow, own: dict[str, int],
               configs: list[dict[str, int]], progress: Progress) -> Round:
    """The candidates and the own configuration timed in full, interleaved (the first candidate, the own one, the
    rest), then generality and the sanitizer for the winner only (on an idle twin already where the first
    candidate wins, beside.py)."""
    found = Round()
    first = configs[0]
    progress(f"tuning: full validation and timing of {Config(params=first).label()}, then v{v.number}'s own "
             f"configuration {Config(params=own).label()} back to back")
    beside = Starter(ctx, session, v.source, first, progress)
    found.timed.append((first, evaluate(ctx, session, v.source, beside, params=first, vendor_ms=session.vendor_ms)))
    mine = found.timed[0][1] if first == own else \
        evaluate(ctx, session, v.source, progress, params=own, vendor_ms=session.vendor_ms)
    if first == own:
        found.own_failed = "it is the candidate itself"
    elif mine.status.passed and mine.timing:
        found.own = mine.timing.model_copy(update={"params": own, "params_from": (
            v.timing.params_from if v.timing and v.timing.params_from else "defaults")})
    else:
        found.own_failed = f"{mine.failure}: {(mine.message or '')[:200]}"
    for params in configs[1:]:
        progress(f"tuning: full timing of {Config(params=params).label()}")
        found.timed.append((params, evaluate(ctx, session, v.source, progress, params=params,
                                             vendor_ms=session.vendor_ms)))
    passed = [(p, o) for p, o in found.timed if o.status.passed and o.timing]
    winner = min(passed, key=lambda x: x[1].timing.median_ms if x[1].timing else 0.0, default=None)
    checked = beside.checked(winner is not None and winner[0] == first, progress)
    if winner is not None:
        params, outcome = winner
        found.winner = (params, with_generality(ctx, session, v.source, outcome, progress, params,
                                                checked=checked if params == first else None))
    elif found.timed:
        found.winner = found.timed[0]  # every candidate failed: the first one's failure is said
    return found
