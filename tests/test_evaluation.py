"""Timing policy, free of any device."""

from __future__ import annotations

import numpy as np
import pytest

from peak_mcp.core import timing
from peak_mcp.core.timing import Chunk, measure, median_pinned, settled_total, summarize, timed_reps


@pytest.mark.parametrize(("per_launch_s", "expected"), [
    (1e-4, 1000),   # fast: the budget would allow more than max_reps
    (0.01, 98),     # the budget decides
    (0.5, 10),      # two fit the budget, but min_reps holds
    (5.0, 3),       # one launch outlasts the budget: a median and a spread, not 10 launches of 5 s
    (300.0, 3),
])
def test_timed_reps_fit_the_budget_with_a_floor(per_launch_s: float, expected: int) -> None:
    assert timed_reps(per_launch_s, time_budget_s=1.0, min_reps=10, max_reps=1000) == expected


def test_summary_statistics() -> None:
    stats = summarize([2.0, 1.0, 4.0], flops=2e9, min_bytes=1e6)
    assert stats["median_ms"] == 2.0 and stats["min_ms"] == 1.0 and stats["max_ms"] == 4.0 and stats["reps"] == 3
    assert stats["tflops"] == pytest.approx(2e9 / 2e-3 / 1e12)
    assert stats["gbps"] == pytest.approx(1e6 / 2e-3 / 1e9)
    assert stats["cv"] == pytest.approx(1.247219 / (7 / 3), rel=1e-5)


class Clock:
    """The timing module's clock, moved on by the launches below: no sleeping, so a loaded machine's oversleeping
    (the wall time now caps the launches) cannot change what measure decides."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(timing, "time", fake)
    return fake


def _timer(ms: float, calls: list[Chunk], clock: Clock, spread: float = 0.0, wall_ms: float | None = None):
    """Launches of `ms` each (uniform within +-spread of it), costing `wall_ms` of wall time each (the caller's
    checks between launches included)."""
    rng = np.random.default_rng(0)

    def timer(chunk: Chunk) -> list[float]:
        calls.append(chunk)
        clock.now += (wall_ms or ms) * chunk.reps / 1e3
        return list(ms * (1 + spread * rng.uniform(-1, 1, chunk.reps)))
    return timer


def test_measure_warms_up_then_times_whole_rotations_in_chunks(clock: Clock) -> None:
    warm: list[Chunk] = []
    timed: list[Chunk] = []
    # a 20% spread: the median is never pinned to 0.2% in 50 launches, so the budget decides
    stats = measure(_timer(2.0, timed, clock, spread=0.2), warm_timer=_timer(2.0, warm, clock), budget_s=0.1,
                    min_reps=10, max_reps=1000, flops=2e9, rotation=3)
    assert sum(c.reps for c in warm) >= 50 and all(c.total == 0 for c in warm)  # about 0.2 s of warm-up
    assert stats["reps"] % 3 == 0 and stats["reps"] == sum(c.reps for c in timed) >= 30
    assert [c.offset for c in timed] == list(np.cumsum([0] + [c.reps for c in timed[:-1]]))
    assert timed[-1].total == stats["reps"] and all(c.total >= stats["reps"] for c in timed)
    assert abs(stats["median_ms"] - 2.0) < 0.2 and stats["wall_s"] > 0


def test_a_pinned_median_ends_the_timing_with_one_whole_final_rotation(clock: Clock) -> None:
    """A steady kernel stops long before its budget; the launches of the last rotation all run in a chunk that
    knows the final total (the benchmark leaves that rotation's inputs as its launches saw them)."""
    timed: list[Chunk] = []
    stats = measure(_timer(2.0, timed, clock, spread=0.0005), budget_s=1.0, min_reps=10, max_reps=1000, flops=1.0,
                    rotation=3, warmup_s=0.01)
    timed = [c for c in timed if c.total]
    assert stats["reps"] % 3 == 0 and 10 <= stats["reps"] < 100
    last = timed[-1]
    assert last.total == stats["reps"] and last.offset <= stats["reps"] - 3 and last.offset + last.reps == last.total
    assert timed[0].total > stats["reps"], "the plan was longer: the median cut it short"
    assert stats["stopped"] == "steady"


def test_the_budget_counts_the_callers_checks_between_launches(clock: Clock) -> None:
    """Launches timed at 1 ms that cost 10 ms of wall time each (an audit of a large output after every one): the
    wall time, not the device time, holds the budget."""
    timed: list[Chunk] = []
    stats = measure(_timer(1.0, timed, clock, spread=0.3, wall_ms=10.0), warm_timer=_timer(1.0, [], clock),
                    budget_s=0.5, min_reps=10, max_reps=1000, flops=1.0, rotation=2, warmup_s=0.01)
    assert stats["reps"] % 2 == 0 and 10 <= stats["reps"] <= 70
    assert timed[0].total >= 300  # planned from the warm-up, which had no checks
    assert stats["stopped"] == "budget"


@pytest.mark.parametrize(("spread", "n", "pinned"), [(0.0005, 20, True), (0.05, 200, False), (0.001, 4, False)])
def test_median_pinned(spread: float, n: int, pinned: bool) -> None:
    times = list(1.0 + spread * np.random.default_rng(1).uniform(-1, 1, n))
    assert median_pinned(times) is pinned


def test_settled_total_keeps_the_plan_while_the_median_moves_and_the_budget_allows() -> None:
    noisy = list(1.0 + 0.2 * np.random.default_rng(2).uniform(-1, 1, 40))
    def settle(times: list[float], rotation: int, remaining_s: float) -> tuple[int, str | None]:
        return settled_total(times, 300, rotation, 10, remaining_s, 1e-3)

    assert settle(noisy, 2, 10.0) == (300, None)
    assert settle(noisy, 2, 0.0) == (42, "budget")
    assert settle([1.0] * 41, 3, 10.0) == (45, "steady")


def test_a_slow_kernel_reports_progress_after_every_launch(clock: Clock) -> None:
    """A launch longer than a chunk: the hang detector must hear after each one (the printf-flood kernel took
    7.3 s a launch on an H100; two launches between notes outlasted an 8 s detector), and the total stays a whole
    number of rotations."""
    timed: list[Chunk] = []
    notes: list[tuple[float, str]] = []
    stats = measure(_timer(600.0, timed, clock), budget_s=0.1, min_reps=3, max_reps=10, flops=1.0, rotation=2,
                    progress=lambda note: notes.append((clock.now, note)))
    assert stats["reps"] == 4 and [c.reps for c in timed] == [1, 1, 1, 1, 1]  # the first is the warm-up
    assert notes[0][1].startswith("benchmark: warmed up") and len(notes) == 5
    gaps = np.diff([0.0] + [at for at, _ in notes])
    assert gaps.max() < 0.6 * 1.5, "no gap between notes may hold two launches"


def test_measure_stops_when_a_check_between_chunks_fails(clock: Clock) -> None:
    timed: list[Chunk] = []
    stats = measure(_timer(50.0, timed, clock), budget_s=5.0, min_reps=10, max_reps=1000, flops=1.0,
                    after_chunk=lambda: False)
    assert len(timed) == 1 + sum(1 for c in timed if c.total == 0)  # warm-up chunks, then one timed chunk
    assert stats["reps"] == timed[-1].reps < 100
