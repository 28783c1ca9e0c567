"""Where submissions' seconds went, from a data dir's records (issue 35's per-phase table): each version's total and
phases (loop/timeline.py), and the median of each phase over the versions shown.

    python tools/timelines.py --data-dir DIR [--session ID] [--last N] [--steps K]

--steps K lists each version's K longest steps, a heartbeat's repeated lines merged into one step ("x10": ten lines;
records made since session 48 hold them merged already, and a "(N steps not kept)" line past 64 steps).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from peak_mcp.store.database import Store
from peak_mcp.store.records import Timeline


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--session", default=None)
    parser.add_argument("--last", type=int, default=20)
    parser.add_argument("--steps", type=int, default=0, help="each version's longest recorded steps")
    args = parser.parse_args()
    store = Store(args.data_dir / "peak.sqlite3")
    sessions = [store.session(args.session)] if args.session else store.sessions()
    rows = [(s, v) for s in sessions for v in store.versions(s.id) if v.timeline is not None][-args.last:]
    if not rows:
        print("no version with a timeline in", args.data_dir)
        return 1
    phases = sorted({p for _, v in rows for p in v.timeline.phases})
    print("| session | version | problem | status | total s | " + " | ".join(phases) + " |")
    print("|---" * (5 + len(phases)) + "|")
    for session, v in rows:
        cells = [f"{v.timeline.phases.get(p, 0.0):.2f}" for p in phases]
        print(f"| {session.id} | v{v.number} | {session.problem} | {v.status.value} | {v.timeline.total_s:.2f} | "
              + " | ".join(cells) + " |")
    medians = [f"{statistics.median(v.timeline.phases.get(p, 0.0) for _, v in rows):.2f}" for p in phases]
    total = statistics.median(v.timeline.total_s for _, v in rows)
    print(f"| median | | | | {total:.2f} | " + " | ".join(medians) + " |")
    for session, v in rows if args.steps > 0 else []:
        print(f"\n{session.id} v{v.number}, its {args.steps} longest steps of {len(v.timeline.steps)} recorded:")
        for seconds, count, line in longest_steps(v.timeline, args.steps):
            print(f"  {seconds:7.2f} s  {line[:160]}" + (f"  x{count}" if count > 1 else ""))
    return 0


def longest_steps(timeline: Timeline, k: int) -> list[tuple[float, int, str]]:
    """The timeline's `k` longest steps as (seconds, lines, label), longest first. A heartbeat repeats a long step's
    line about once a second, so consecutive lines with the same label are one step: their seconds are summed."""
    steps = timeline.steps
    # a cut record's last step runs to the end; a version may have recorded none
    ends = [at for at, _ in steps[1:]] + [timeline.total_s] * bool(steps)
    merged: list[tuple[float, int, str]] = []
    for (at, line), until in zip(steps, ends, strict=True):
        if merged and merged[-1][2] == line:
            seconds, count, _ = merged[-1]
            merged[-1] = (seconds + until - at, count + 1, line)
        else:
            merged.append((until - at, 1, line))
    return sorted(merged, reverse=True)[:k]


if __name__ == "__main__":
    sys.exit(main())
