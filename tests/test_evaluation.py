"""Timing policy, free of any device."""

from __future__ import annotations

import time

import numpy as np
import pytest

from peak_mcp.core.timing import Chunk, measure, summarize, timed_reps


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


def _timer(ms: float, calls: list[Chunk]):
    def timer(chunk: Chunk) -> list[float]:
        calls.append(chunk)
        time.sleep(ms * chunk.reps / 1e3)
        return [ms] * chunk.reps
    return timer


def test_measure_warms_up_then_times_whole_rotations_in_chunks() -> None:
    warm: list[Chunk] = []
    timed: list[Chunk] = []
    stats = measure(_timer(2.0, timed), warm_timer=_timer(2.0, warm), budget_s=0.1, min_reps=10, max_reps=1000,
                    flops=2e9, rotation=3)
    assert sum(c.reps for c in warm) >= 50 and all(c.total == 0 for c in warm)  # about 0.2 s of warm-up
    assert stats["reps"] % 3 == 0 and stats["reps"] == sum(c.reps for c in timed) >= 30
    assert [c.offset for c in timed] == list(np.cumsum([0] + [c.reps for c in timed[:-1]]))
    assert all(c.total == stats["reps"] for c in timed)
    assert stats["median_ms"] == 2.0 and stats["wall_s"] > 0


def test_a_slow_kernel_reports_progress_after_every_launch() -> None:
    """A launch longer than a chunk: the hang detector must hear after each one (the printf-flood kernel took
    7.3 s a launch on an H100; two launches between notes outlasted an 8 s detector), and the total stays a whole
    number of rotations."""
    timed: list[Chunk] = []
    notes: list[tuple[float, str]] = []
    started = time.monotonic()
    stats = measure(_timer(600.0, timed), budget_s=0.1, min_reps=3, max_reps=10, flops=1.0, rotation=2,
                    progress=lambda note: notes.append((time.monotonic() - started, note)))
    assert stats["reps"] == 4 and [c.reps for c in timed] == [1, 1, 1, 1, 1]  # the first is the warm-up
    assert notes[0][1].startswith("benchmark: warmed up") and len(notes) == 5
    gaps = np.diff([0.0] + [at for at, _ in notes])
    assert gaps.max() < 0.6 * 1.5, "no gap between notes may hold two launches"


def test_measure_stops_when_a_check_between_chunks_fails() -> None:
    timed: list[Chunk] = []
    stats = measure(_timer(50.0, timed), budget_s=5.0, min_reps=10, max_reps=1000, flops=1.0,
                    after_chunk=lambda: False)
    assert len(timed) == 1 + sum(1 for c in timed if c.total == 0)  # warm-up chunks, then one timed chunk
    assert stats["reps"] == timed[-1].reps < 100
