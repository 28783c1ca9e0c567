"""Whether two timings differ beyond noise: by their middle halves (p25..p75), which a re-run lands in half the time.
Every comparison the server says (faster, slower, within noise) is judged here."""

from __future__ import annotations

from typing import Any

from peak_mcp.evaluation.phases import Summary

NORMAL_QUARTILE = 0.6745  # a normal distribution's quartiles lie this many standard deviations from its median
FASTER, SLOWER, NOISE = "faster beyond noise", "slower beyond noise", "within noise"


def spread(timing: Summary | Any) -> tuple[float, float]:
    """The middle half of a timing's launches, p25..p75 (what a re-run lands in half the time). Rows stored before
    quartiles were recorded: the quartiles a normal spread of their cv would have; a point where neither is known.
    `timing`: a Summary, or anything with median_ms and the same optional fields (a configs.ConfigResult)."""
    median = timing.median_ms or 0.0
    p25, p75, cv = getattr(timing, "p25_ms", None), getattr(timing, "p75_ms", None), getattr(timing, "cv", None)
    if p25 is not None and p75 is not None:
        return p25, p75
    if cv is not None:
        half = NORMAL_QUARTILE * cv * (getattr(timing, "mean_ms", None) or median)
        return median - half, median + half
    return median, median


def change(new: Summary | Any, old: Summary | Any) -> str:
    """`new` against `old`: FASTER or SLOWER only when their middle halves do not overlap, else NOISE (a re-run
    could order them the other way)."""
    low, high = spread(new)
    old_low, old_high = spread(old)
    if high < old_low:
        return FASTER
    if low > old_high:
        return SLOWER
    return NOISE
