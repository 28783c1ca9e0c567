"""Timing policy, free of any device."""

from __future__ import annotations

import pytest

from peak_mcp.evaluation import summarize, timed_reps


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
