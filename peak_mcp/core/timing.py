"""One timing policy for everything timed: the kernels and the vendor libraries they are compared with.

`measure(timer, ...)` warms up for a wall time (GPU clocks take tens of milliseconds to ramp), sizes the timed
launches by a budget, runs them in chunks of about half a second, and summarizes. Progress follows every chunk,
and a chunk is one launch when a launch takes longer than that, so the hang detector hears from a slow but
finishing kernel once per launch; a caller can check outputs between chunks. A `timer(chunk)` launches
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
LAUNCH_OVERHEAD_S = 2e-4  # host cost per launch the device timers do not see



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
    returns False (a check failed). Returns `summarize(...)` plus `wall_s`."""
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
    times: list[float] = []
    started = time.monotonic()
    while len(times) < reps:
        chunk = min(reps - len(times), max(1, int(CHUNK_S / wall_per_launch)))
        chunk_started = time.monotonic()
        times += timer(Chunk(chunk, len(times), reps))
        wall_per_launch = max(1e-6, (time.monotonic() - chunk_started) / chunk)
        if progress:
            progress(f"benchmark: {len(times)}/{reps} timed launches")
        if after_chunk is not None and not after_chunk():
            break
    return {**summarize(times, flops, min_bytes), "wall_s": time.monotonic() - started}


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
