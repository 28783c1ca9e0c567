"""One timing policy for everything timed: the kernels and the vendor libraries they are compared with.

`measure(timer, ...)` warms up for a wall time (GPU clocks take tens of milliseconds to ramp), sizes the timed
launches by a budget, runs them in chunks of at most half a second, and summarizes. The budget is a ceiling on wall
time, the caller's checks between launches included, and the timing stops before it once the median is pinned
(PRECISION): a 3 ms GEMM needs a fraction of a second for that, a noisy 10 us kernel the whole budget. Progress
follows every chunk, and a chunk is one launch when a launch takes longer than that, so the hang detector hears
from a slow but finishing kernel once per launch; a caller can check outputs between chunks. A `timer(chunk)` launches
`chunk.reps` times from a cold cache and returns per-launch milliseconds from device timers; `chunk.offset` is the
number of timed launches before this chunk (callers that rotate input sets or audit launches need it: chunks are
not whole rotations, only the total is).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

WARMUP_S = 0.2
MAX_WARMUP_REPS = 4096
CHUNK_S = 0.5
CHUNKS_PER_BUDGET = 8  # chunks are at most this share of the budget: the stopping rule is asked between them
LAUNCH_OVERHEAD_S = 2e-4  # host cost per launch the device timers do not see
# Enough launches once the median's 95% interval (order statistics, no distribution assumed) is within this share of
# it either side: far finer than the run-to-run drift of a GPU's clocks, which no launch count removes.
PRECISION = 0.002


@dataclass(frozen=True)
class Chunk:
    reps: int
    offset: int  # timed launches before this chunk
    total: int  # timed launches in all (0 during the warm-up)


Timer = Callable[[Chunk], list[float]]


def measure(timer: Timer, *, budget_s: float, min_reps: int, max_reps: int, flops: float, min_bytes: float = 0.0,
            rotation: int = 1, warm_timer: Timer | None = None, after_chunk: Callable[[], bool] | None = None,
            progress: Callable[[str], None] | None = None, warmup_s: float = WARMUP_S) -> dict[str, Any]:
    """Warm up for `warmup_s`, then time about `budget_s` of launches in whole multiples of `rotation` (input sets
    rotated); `warm_timer` (default `timer`) runs the untimed warm-up; `after_chunk() -> bool` stops early when it
    returns False (a check failed). Returns `summarize(...)` plus `wall_s` and `stopped`: what ended the timed
    launches ("steady": the median pinned; "budget": the wall time; "cap": max_reps; "check": after_chunk)."""
    warm_timer = warm_timer or timer
    warm: list[float] = []
    started = time.monotonic()
    chunk = 1
    while True:
        # Chunks grow from one launch, sized by the wall time each launch really costs (the cache flush before it
        # included: on a CPU device it can dwarf the kernel).
        warm += warm_timer(Chunk(chunk, len(warm), 0))
        elapsed = time.monotonic() - started
        if elapsed >= warmup_s or len(warm) >= MAX_WARMUP_REPS:
            break
        chunk = max(1, min(len(warm), int((warmup_s - elapsed) / (elapsed / len(warm)))))
    if progress:
        progress(f"benchmark: warmed up ({len(warm)} launches)")
    wall_per_launch = (time.monotonic() - started) / len(warm)
    per_launch_s = max(float(np.median(warm[len(warm) // 2:])) / 1e3, 1e-6)
    budget_reps = timed_reps(max(per_launch_s, wall_per_launch), budget_s, min_reps, max_reps)
    reps = -(-max(rotation, budget_reps) // rotation) * rotation
    stopped = "cap" if budget_reps >= max_reps else "budget"  # what ends it where nothing ends it sooner
    times: list[float] = []
    started = time.monotonic()
    chunk_s = min(CHUNK_S, max(budget_s / CHUNKS_PER_BUDGET, 0.01))
    while len(times) < reps:
        chunk = min(reps - len(times), max(1, int(chunk_s / wall_per_launch)))
        chunk_started = time.monotonic()
        times += timer(Chunk(chunk, len(times), reps))
        wall_per_launch = max(1e-6, (time.monotonic() - chunk_started) / chunk)
        if progress:
            progress(f"benchmark: {len(times)}/{reps} timed launches")
        if after_chunk is not None and not after_chunk():
            stopped = "check"
            break
        settled, why = settled_total(times, reps, rotation, min_reps, budget_s - (time.monotonic() - started),
                                     wall_per_launch)
        reps, stopped = settled, why or stopped
    return {**summarize(times, flops, min_bytes), "wall_s": time.monotonic() - started, "stopped": stopped}


def settled_total(times: list[float], planned: int, rotation: int, min_reps: int, remaining_s: float,
                  wall_per_launch_s: float) -> tuple[int, str | None]:
    """The timed launches in all, asked after each chunk: `planned`, or fewer where the median is pinned already or
    the budget's wall time (the caller's checks between launches included: an audit of a large output can cost many
    times the launch) runs out first. Fewer ends with one more whole rotation than done so far: the final rotation
    is told it is final before it starts (callers leave its inputs as its launches saw them). With the total, why it
    is fewer: "steady" (the median is pinned) or "budget"; None where the plan holds."""
    done = len(times)
    if done >= planned:
        return planned, None
    affordable = done + max(0, int(remaining_s / wall_per_launch_s))
    pinned = done >= min_reps and median_pinned(times)
    if not pinned and affordable >= planned:
        return planned, None
    target = max(done if pinned else affordable, min(min_reps, planned), done + rotation)
    total = min(planned, -(-target // rotation) * rotation)  # planned is a whole number of rotations
    return total, ("steady" if pinned else "budget") if total < planned else None


def median_pinned(times: list[float], precision: float = PRECISION) -> bool:
    """Whether the median's 95% interval lies within `precision` of it either side: the order statistics at
    n/2 -+ 0.98 sqrt(n) bound it, whatever the distribution."""
    n = len(times)
    if n < 8:
        return False
    ordered = np.sort(np.asarray(times, dtype=np.float64))
    half = 0.98 * np.sqrt(n)
    low, high = ordered[max(0, int(n / 2 - half))], ordered[min(n - 1, int(np.ceil(n / 2 + half)))]
    median = float(np.median(ordered))
    return bool(median > 0 and (high - low) / 2 <= precision * median)


def timed_reps(per_launch_s: float, time_budget_s: float, min_reps: int, max_reps: int) -> int:
    """Launches to time: as many as fit the budget, at least min_reps, at most max_reps. A kernel whose one
    launch outlasts the whole budget gets 3 (enough for a median and a spread), not min_reps launches of
    seconds or minutes each."""
    floor = min_reps if per_launch_s <= time_budget_s else min(3, min_reps)
    return int(min(max_reps, max(floor, time_budget_s / (per_launch_s + LAUNCH_OVERHEAD_S))))


def summarize(times_ms: list[float], flops: float, min_bytes: float) -> dict[str, Any]:
    """Median, spread and rates of the timed launches. p25_ms..p75_ms, the middle half of the launches, is the
    spread that speedups are judged against (reports.noise): two times whose middle halves overlap are the same
    time as far as this timing can tell."""
    arr = np.asarray(times_ms, dtype=np.float64)
    median = float(np.median(arr))
    p25, p75 = (float(q) for q in np.percentile(arr, [25, 75]))
    return {
        "reps": int(arr.size),
        "median_ms": median,
        "min_ms": float(arr.min()),
        "max_ms": float(arr.max()),
        "p25_ms": p25,
        "p75_ms": p75,
        "mean_ms": float(arr.mean()),
        "cv": float(arr.std() / arr.mean()) if arr.mean() > 0 else 0.0,
        "tflops": flops / (median * 1e-3) / 1e12 if median > 0 else 0.0,
        "gbps": min_bytes / (median * 1e-3) / 1e9 if median > 0 else 0.0,
        "cold_cache": True,
    }
