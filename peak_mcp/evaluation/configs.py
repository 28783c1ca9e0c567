"""Tuning's records: one configuration of a kernel's `params`, what measuring it came to, and a tune's report. Shared
by the worker that measures (runner/tune_job.py), the loop that searches (loop/tuning.py) and the store."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from peak_mcp.evaluation.noise import FASTER, SLOWER, change
from peak_mcp.evaluation.phases import Timing

KEEP_TOP = 128  # configurations a version keeps to seed its children's tuning

Key = tuple[tuple[str, int], ...]


class Config(BaseModel):
    """One assignment of every tuning parameter; hashable by its values."""

    model_config = ConfigDict(frozen=True)
    params: dict[str, int]

    @property
    def key(self) -> Key:
        return tuple(sorted(self.params.items()))

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and self.key == other.key

    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.params.items())


Status = Literal["ok", "pruned", "failed", "compiled"]  # compiled: on a compile-only executor, nothing run
# why a configuration was pruned or failed: where | geometry | compile | resources | validation | recheck | error
Kind = Literal["where", "geometry", "compile", "resources", "validation", "recheck", "error"]


class ConfigResult(BaseModel):
    """What one configuration came to: timed (ok), pruned before running (with the reason) or failed its checks."""

    params: dict[str, int]
    status: Status
    reason: str | None = None
    kind: Kind | None = None
    median_ms: float | None = None
    tflops: float | None = None
    gbps: float | None = None  # memory-bound work is said in GB/s, as the version's own report says it (core/units)
    cv: float | None = None  # spread of the timed launches (short budget: a rough figure)
    p25_ms: float | None = None  # the middle half of the timed launches: what noise is judged by (noise.change)
    p75_ms: float | None = None
    reps: int | None = None
    device: int | None = None  # the device index that measured it (tuning fans out over devices of one model)


class BestConfig(BaseModel):
    params: dict[str, int]
    median_ms: float
    tflops: float | None = None
    gbps: float | None = None


class SearchedSpace(BaseModel):
    """What a search's results hold for: the version's parameters and `where` lines (its source, which never
    changes), the sizes they were measured at and the device model. A complete search of the same space on the same
    kind of device is not run again (tuning/tune.py)."""

    params: dict[str, list[int]]
    where: list[str] = Field(default_factory=list)
    sizes: dict[str, int]
    device: str


class TuneReport(BaseModel):
    version: int
    strategy: str
    space_size: int  # every combination of the declared values
    valid_size: int  # those that meet `where` at the session's sizes
    tried: int  # configurations sent to the device (compiled, then validated and timed unless pruned)
    where_pruned: int  # configurations `where` ruled out at these sizes
    pruned: list[ConfigResult]  # tried ones pruned (compile, resources, geometry) and up to 20 where-pruned examples
    results: list[ConfigResult]  # validated ones: ok (timed) or failed (a check's reason)
    best: BestConfig | None
    stopped: str  # why the search ended: space exhausted, max_configs reached, time budget spent
    search_s: float | None = None  # wall time of the search, without the full re-timing of the best afterwards
    devices: list[int] = Field(default_factory=list)  # device indices that measured configurations (fan-out)
    # The search's fastest few timed again, longer and one after another on the session's device, where their
    # spreads were wide or overlapped: the best is chosen from these. chosen_by says how the best was chosen.
    retimed: list[ConfigResult] = Field(default_factory=list)
    chosen_by: str | None = None
    # `best.median_ms` is the search's own estimate (short timings). `recorded` is the version's time afterwards: the
    # best configuration validated and timed in full on the session's device (what history and get_version show);
    # None where that full timing failed. `estimate_gap`: one phrase where the two differ beyond noise.
    recorded: BestConfig | None = None
    recorded_device: int | None = None
    estimate_gap: str | None = None
    # `full`: the best timed in full where the version did not take it (no faster than its own configuration);
    # `versus_own`: one phrase comparing the best's full timing with the version's own configuration's (the verdict
    # beyond noise or within it), whichever way the tune went.
    full: BestConfig | None = None
    versus_own: str | None = None
    # `own`: the version's own configuration timed in full in this round, back to back with the candidates it was
    # judged against (the keep/adopt verdict and versus_own read it, never the submit-time record); None where no
    # candidate was timed in full or its timing failed. `runners_up`: the other candidates timed in full in the
    # round, where the search's estimate of the fastest was far from its full time.
    own: Timing | None = None
    runners_up: list[BestConfig] = Field(default_factory=list)
    # The version's timing as submitted, before any tune changed it (carried from tune to tune; None for reports from
    # before it was kept), and when this tune ran: stats credit a transformation with its text's own time, and a
    # tune's gain to tune.
    submitted: Timing | None = None
    at: float | None = None
    # The space this search covered (None for reports from before it was kept); `failures`: each configuration that
    # was tried and failed its checks or its build, in a phrase ("TILE=8 WPT=4: compile error: ..."), the first 64
    # and a count of the rest (the answer's `results` keep only the fastest); `reused`: set on an answer that returns
    # this record instead of searching again (never stored).
    searched: SearchedSpace | None = None
    failures: list[str] = Field(default_factory=list)
    reused: str | None = None

    @property
    def complete(self) -> bool:
        """Every valid configuration of the space was measured: searching it again would measure the same ones."""
        return self.searched is not None and 0 < self.valid_size <= self.tried

    def top(self, k: int = KEEP_TOP) -> list[dict[str, int]]:
        """The k fastest configurations, fastest first: what a child's tuning is seeded with."""
        timed = sorted((r for r in self.results if r.status == "ok" and r.median_ms is not None),
                       key=lambda r: r.median_ms or 0.0)
        return [r.params for r in timed[:k]]


def beats(tuned: Any, own: Any | None) -> bool:
    """Whether a configuration's full timing earns it the version: faster than the configuration the version was
    timed with (`own`; None when that is the same configuration or there is none), beyond noise or at least by its
    median. The search's brief timings can rank first a configuration the full run finds slower, and adopting it
    would record tuning as a loss (an agent saw 14.41 ms become 16.94 ms "within noise" on a busy CPU device)."""
    if own is None or own.median_ms is None:
        return True
    verdict = change(tuned, own)
    return verdict == FASTER or (verdict != SLOWER and (tuned.median_ms or 0.0) < own.median_ms)
