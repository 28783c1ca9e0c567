"""The stop rules of `peak-mcp agent`, kept by the command rather than the model: versions made (counted from the
server's history, so tune's configurations and apply_transformation's attempts count too), minutes, and a target
share of the roofline (or of the vendor library where the server gives no roofline) reached by the best version.
Also the log of what the model tried: every tool call with the versions it made."""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, Field


class Budget(BaseModel):
    max_versions: int | None = Field(None, ge=1, description="stop once this many versions past those at the start "
                                                             "exist")
    max_minutes: float | None = Field(None, gt=0)
    target_percent: float | None = Field(None, gt=0, description="of the roofline, else of the vendor library, as "
                                                                 "history reports the best version")


class Tried(BaseModel):
    """One tool call of the model, and what came of it."""

    tool: str
    args: dict[str, Any]
    seconds: float
    versions: list[dict[str, Any]] = Field(default_factory=list, description="the versions it made: number, status, "
                                                                             "failure, median_ms, speedup_vs_v0")
    error: str | None = None
    refused: str | None = Field(None, description="not sent to the server: the budget was spent")


def short_args(args: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments for the log: sources as their length, long texts cut."""
    return {k: (f"<{len(v)} chars>" if k == "source" or len(v) > 200 else v) if isinstance(v, str) else v
            for k, v in args.items()}


def target_share(row: dict[str, Any]) -> tuple[str, float] | None:
    for key in ("pct_of_roofline", "pct_of_vendor"):
        if row.get(key):
            return key, float(row[key])
    return None


class Tracker:
    def __init__(self, budget: Budget, history: dict[str, Any], started: float | None = None) -> None:
        self.budget, self.started = budget, time.monotonic() if started is None else started
        self.at_start = {r["version"] for r in history.get("rows", [])}
        self.history = history
        self.tried: list[Tried] = []

    def observe(self, history: dict[str, Any]) -> list[dict[str, Any]]:
        """Takes the newest history; returns the rows it has that the last one had not."""
        seen = {r["version"] for r in self.history.get("rows", [])}
        self.history = history
        return [r for r in history.get("rows", []) if r["version"] not in seen]

    @property
    def made(self) -> int:
        return sum(r["version"] not in self.at_start for r in self.history.get("rows", []))

    def best_row(self) -> dict[str, Any] | None:
        best = self.history.get("best")
        return next((r for r in self.history.get("rows", []) if r["version"] == best), None)

    def minutes(self) -> float:
        return (time.monotonic() - self.started) / 60

    def stop_reason(self) -> str | None:
        b = self.budget
        if b.max_versions is not None and self.made >= b.max_versions:
            return f"version budget spent: {self.made} version(s) made (--max-versions {b.max_versions})"
        if b.target_percent is not None and (row := self.best_row()) and (share := target_share(row)):
            key, value = share
            if value >= b.target_percent:
                return (f"target reached: best v{row['version']} at {value:.1f}% {key.removeprefix('pct_of_')} "
                        f"(--target-percent {b.target_percent:g})")
        if b.max_minutes is not None and self.minutes() >= b.max_minutes:
            return f"time budget spent: {self.minutes():.1f} min (--max-minutes {b.max_minutes:g})"
        return None
