"""The report of an experiment's sequence runs, as PEAK plots performance along a sequence of transformations: per
model, sequence and step, the runs (repeats) that reached the step, how many passed, and the speedup over the base
version that the runs held after it (a failed step holds its parent's), median and min-max over the repeats.
Markdown, CSV, JSON, and a line plot (PNG, log y, the min-max as a band)."""

from __future__ import annotations

import csv
import io
import statistics
import textwrap
from pathlib import Path

from pydantic import BaseModel

from peak_mcp.research.runner import CellResult


class StepRow(BaseModel):
    model: str
    sequence: int
    step: int
    transformation: str
    runs: int
    succeeded: int  # the step passed (benchmarked): the run went on from its result
    success_rate: float
    median_speedup_vs_v0: float | None  # held after the step, over the runs
    min_speedup_vs_v0: float | None
    max_speedup_vs_v0: float | None


FIELDS = list(StepRow.model_fields)


def rows(cells: list[CellResult]) -> list[StepRow]:
    groups: dict[tuple[str, int, int], list[CellResult]] = {}
    for cell in cells:
        if cell.sequence is not None and cell.step is not None:
            groups.setdefault((cell.model, cell.sequence, cell.step), []).append(cell)
    found = []
    for (model, sequence, step), group in sorted(groups.items()):
        speedups = [c.held_speedup_vs_v0 for c in group if c.held_speedup_vs_v0 is not None]
        passed = sum(c.passed for c in group)
        found.append(StepRow(
            model=model, sequence=sequence, step=step, transformation=group[0].transformation, runs=len(group),
            succeeded=passed, success_rate=round(passed / len(group), 4),
            median_speedup_vs_v0=round(statistics.median(speedups), 4) if speedups else None,
            min_speedup_vs_v0=min(speedups, default=None), max_speedup_vs_v0=max(speedups, default=None)))
    return found


def points(cells: list[CellResult]) -> list[dict[str, object]]:
    """Each run's steps, the points behind the medians and bands."""
    keep = ("model", "sequence", "repeat", "step", "transformation", "parent", "result_version", "succeeded",
            "result_ms", "speedup_vs_v0", "speedup_vs_parent", "held_version", "held_speedup_vs_v0", "retimed_ms",
            "retimed_base_ms")
    steps = sorted((c for c in cells if c.sequence is not None),
                   key=lambda c: (c.model, c.sequence or 0, c.repeat, c.step or 0))
    return [c.model_dump(include=set(keep)) | {"passed": c.passed} for c in steps]


def _x(value: float | None) -> str:
    return f"{value:.3g}x" if value is not None else "-"


def markdown(table: list[StepRow], png: str | None) -> str:
    lines = ["## Performance along the sequences", "",
             "Speedup over the base version that each run held after the step (a failed step holds its parent's): "
             "median (min-max) over the runs. Where the plan retimes (the default), a passing step's result and the "
             "base were timed again back to back and the speedup is that pair's." + (f" Plot: `{png}`." if png else ""),
             "",
             "| model | sequence | step | transformation | success | speedup vs v0 |", "|---|---|---|---|---|---|"]
    for r in table:
        lines.append(f"| {r.model} | {r.sequence} | {r.step} | {r.transformation} | {r.success_rate:.0%} "
                     f"({r.succeeded}/{r.runs}) | {_x(r.median_speedup_vs_v0)} ({_x(r.min_speedup_vs_v0)}-"
                     f"{_x(r.max_speedup_vs_v0)}) |")
    return "\n".join(lines) + "\n"


def csv_text(table: list[StepRow]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    for r in table:
        writer.writerow(r.model_dump())
    return buffer.getvalue()


def plot(table: list[StepRow], path: Path) -> Path:
    """Median speedup over v0 along the steps (step 0: the base, 1x), one line per (model, sequence), the min-max
    over the runs as a band; log y, since speedups compound."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    lines: dict[tuple[str, int], list[StepRow]] = {}
    for r in table:
        lines.setdefault((r.model, r.sequence), []).append(r)
    fig, ax = plt.subplots(figsize=(7, 4))
    single = len(lines) == 1  # its steps name the x axis; several lines name theirs in the legend, wrapped
    for (model, sequence), steps in lines.items():
        steps = [s for s in steps if s.median_speedup_vs_v0 is not None]
        xs = [0] + [s.step for s in steps]
        names = " > ".join(s.transformation for s in steps)
        label = f"{model}, sequence {sequence}" + ("" if single else ":\n" + textwrap.fill(names, 70))
        (line,) = ax.plot(xs, [1.0] + [s.median_speedup_vs_v0 for s in steps], marker="o", label=label)
        if single:
            ax.set_xticks(xs, ["v0"] + [f"{s.step}: {s.transformation}" for s in steps], rotation=15, ha="right",
                          fontsize=8)
        ax.fill_between(xs, [1.0] + [s.min_speedup_vs_v0 for s in steps],
                        [1.0] + [s.max_speedup_vs_v0 for s in steps], color=line.get_color(), alpha=0.2)
    ax.set_yscale("log")
    times = FuncFormatter(lambda value, _: f"{value:.3g}x")
    ax.yaxis.set_major_formatter(times)
    ax.yaxis.set_minor_formatter(times)
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_xlabel("step")
    ax.set_ylabel("speedup over v0 (median, min-max band)")
    if not single:
        ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
