"""Where a submission's seconds went: every progress line stamped as it passes, summed by phase for the record.

PEAK spends most of its time evaluating; making that faster starts with knowing where it goes. The worker already
says what it is doing (each progress line names its step), so the timeline needs no probe of its own: a step lasts
from its line to the next one, and a step's phase is read from its words.
"""

from __future__ import annotations

import re
import time

from peak_mcp.loop.context import Progress
from peak_mcp.store.records import Timeline

MAX_STEPS = 64  # steps kept verbatim in the record (the phases' sums cover all of them)
TAIL_STEPS = 16  # of those, the last ones: a long submission keeps its end, not only its first MAX_STEPS lines
# A step's phase, from the first pattern its line matches.
PHASES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((name, re.compile(pattern)) for name, pattern in (
    ("sanitizer", r"sanitiz"),
    ("generality", r"^generality"),
    ("reference", r"inputs and reference|reference kernel|from the problem file|problem's answer|receiving the answer"),
    ("yardsticks", r"^yardsticks|vendor baseline"),
    ("benchmark", r"^benchmark|timed launches|re-?check"),
    ("validate", r"^validate|race check|fresh inputs"),
    ("compile", r"compil"),
    ("queue", r"queue|waiting|lease|worker start"),
))


def phase_of(line: str) -> str:
    return next((name for name, pattern in PHASES if pattern.search(line)), "other")


class Recorder:
    """A Progress that stamps each line and passes it on; `timeline()` sums the steps by phase."""

    def __init__(self, progress: Progress, started: float | None = None) -> None:
        """`started`: another Recorder's start, so that steps beside it share its clock."""
        self.progress = progress
        self.started = time.perf_counter() if started is None else started
        self.steps: list[tuple[float, str]] = [] if started is not None else [(0.0, "admit")]
        self._beside: list[tuple[Recorder, str]] = []

    def __call__(self, line: str) -> None:
        self.steps.append((time.perf_counter() - self.started, line))
        self.progress(line)

    def beside(self, other: Recorder, label: str) -> None:
        """Steps that run at the same time on another device: their phases are summed apart, named
        'PHASE (LABEL)', since they overlap this timeline's own."""
        self._beside.append((other, label))

    @staticmethod
    def _phases(steps: list[tuple[float, str]], until_s: float, suffix: str = "") -> dict[str, float]:
        phases: dict[str, float] = {}
        for (at, line), (until, _) in zip(steps, [*steps[1:], (until_s, "")][:len(steps)], strict=True):
            phase = ("admit" if line == "admit" else phase_of(line)) + suffix
            phases[phase] = phases.get(phase, 0.0) + (until - at)
        return phases

    def timeline(self) -> Timeline:
        total = time.perf_counter() - self.started
        own = list(self.steps)
        phases = self._phases(own, total)
        steps = _repeats_merged(own)  # each timeline's own: a twin's lines between a heartbeat's repeats part them
        for other, label in self._beside:
            theirs = list(other.steps)  # a copy: a twin's job the verdict did not wait for may still add steps
            ended = theirs[-1][0] if theirs else 0.0  # its last line so far: the job's end once it ended
            phases.update(self._phases(theirs, ended, f" ({label})"))
            steps += [(at, f"[{label}] {line}") for at, line in _repeats_merged(theirs)]
        return Timeline(total_s=round(total, 3), phases={k: round(v, 3) for k, v in phases.items()},
                        steps=kept_steps(sorted(steps)))


def _repeats_merged(steps: list[tuple[float, str]]) -> list[tuple[float, str]]:
    merged: list[tuple[float, str]] = []
    for at, line in steps:
        if not merged or merged[-1][1][:120] != line[:120]:
            merged.append((at, line))
    return merged


def kept_steps(steps: list[tuple[float, str]]) -> list[tuple[float, str]]:
    """The steps the record keeps: a heartbeat's repeats of one line merged into its first (a step lasts until the
    next line, so nothing is lost), then, past MAX_STEPS, the first ones and the last TAIL_STEPS with a line that
    says how many between them were left out, at the first one's time. Keeping only the first 64 made the last kept
    line look as if it lasted until the end (a GEMV's 'generate B: done' read as 11 s)."""
    merged = [(round(at, 3), line[:120]) for at, line in _repeats_merged(steps)]
    if len(merged) <= MAX_STEPS:
        return merged
    head = MAX_STEPS - TAIL_STEPS - 1
    left_out = len(merged) - head - TAIL_STEPS
    return [*merged[:head], (merged[head][0], f"({left_out} steps not kept)"), *merged[-TAIL_STEPS:]]
