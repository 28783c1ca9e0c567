"""The reports PEAK gives, from an experiment's finished cells: per model and transformation, the runs (repeats),
the success rate (the run ended with a correct kernel), the first-attempt success rate, the faster-beyond-noise rate,
the attempts' outcome classes, and the median speedup of the successes over the base. Markdown, CSV, JSON, and a
bar chart (PNG); sequence runs in sequence_report's table and line plot beside them."""

from __future__ import annotations

import csv
import io
import json
import statistics
from collections import Counter
from pathlib import Path

from pydantic import BaseModel

from peak_mcp.research import sequence_report
from peak_mcp.research.outcomes import CLASSES
from peak_mcp.research.runner import CellResult


class Row(BaseModel):
    model: str
    transformation: str
    runs: int
    succeeded: int
    success_rate: float
    first_try_rate: float
    faster: int
    faster_rate: float
    attempts: int
    classes: dict[str, int]  # outcome class -> attempts
    median_speedup: float | None  # of the successes, over the base version
    median_wall_s: float


def rows(cells: list[CellResult]) -> list[Row]:
    groups: dict[tuple[str, str], list[CellResult]] = {}
    for cell in cells:
        groups.setdefault((cell.model, cell.transformation), []).append(cell)
    found = []
    for (model, transformation), group in groups.items():
        runs = len(group)
        wins = [c for c in group if c.succeeded]
        speedups = [c.attempts[-1].speedup_vs_base for c in wins if c.attempts and c.attempts[-1].speedup_vs_base]
        classes = Counter(a.outcome for c in group for a in c.attempts)
        found.append(Row(
            model=model, transformation=transformation, runs=runs, succeeded=len(wins),
            success_rate=round(len(wins) / runs, 4),
            first_try_rate=round(sum(c.succeeded and len(c.attempts) == 1 for c in group) / runs, 4),
            faster=sum(c.faster for c in group), faster_rate=round(sum(c.faster for c in group) / runs, 4),
            attempts=sum(len(c.attempts) for c in group),
            classes={k: classes[k] for k in CLASSES if classes[k]},
            median_speedup=round(statistics.median(speedups), 4) if speedups else None,
            median_wall_s=round(statistics.median(c.wall_s for c in group), 1)))
    return found


def totals(table: list[Row]) -> dict[str, dict[str, float]]:
    """Per model, over every run: PEAK's headline (the share of transformations applied successfully)."""
    by_model: dict[str, dict[str, float]] = {}
    for row in table:
        t = by_model.setdefault(row.model, {"runs": 0, "succeeded": 0, "faster": 0})
        t["runs"] += row.runs
        t["succeeded"] += row.succeeded
        t["faster"] += row.faster
    for t in by_model.values():
        t["success_rate"] = round(t["succeeded"] / t["runs"], 4)
        t["faster_rate"] = round(t["faster"] / t["runs"], 4)
    return by_model


def _classes(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "-"


def markdown(table: list[Row]) -> str:
    lines = ["| model | transformation | runs | success | first try | faster beyond noise | attempts | outcomes "
             "(attempts) | median speedup of successes |", "|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        speedup = f"{r.median_speedup:.3g}x" if r.median_speedup else "-"
        lines.append(f"| {r.model} | {r.transformation} | {r.runs} | {r.success_rate:.0%} ({r.succeeded}/{r.runs}) | "
                     f"{r.first_try_rate:.0%} | {r.faster_rate:.0%} ({r.faster}/{r.runs}) | {r.attempts} | "
                     f"{_classes(r.classes)} | {speedup} |")
    lines += [""] + [f"- {model}: {t['success_rate']:.1%} of {t['runs']:.0f} runs succeeded, {t['faster_rate']:.1%} "
                     f"faster beyond noise" for model, t in totals(table).items()]
    return "\n".join(lines) + "\n"


def csv_text(table: list[Row]) -> str:
    buffer = io.StringIO()
    fields = ["model", "transformation", "runs", "succeeded", "success_rate", "first_try_rate", "faster",
              "faster_rate", "attempts", "median_speedup", "median_wall_s", *CLASSES]
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in table:
        record = r.model_dump(exclude={"classes"})
        writer.writerow({**record, **{k: r.classes.get(k, 0) for k in CLASSES}})
    return buffer.getvalue()


def attempts_csv(cells: list[CellResult]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["model", "transformation", "repeat", "attempt", "outcome", "status", "failure", "version",
                     "median_ms", "speedup_vs_base", "request_chars", "reply_chars", "reply_tokens", "model_s",
                     "sequence", "step", "parent"])
    for c in cells:
        for a in c.attempts:
            writer.writerow([c.model, c.transformation, c.repeat, a.attempt, a.outcome, a.status, a.failure or "",
                             a.version, a.median_ms, a.speedup_vs_base, a.request_chars, a.reply_chars,
                             a.reply_tokens, a.model_s, c.sequence, c.step,
                             c.parent if c.sequence is not None else c.base_version])
    return buffer.getvalue()


def plot(table: list[Row], path: Path) -> Path:
    """Success and faster-beyond-noise rate per transformation, one pair of bars per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    transformations = list(dict.fromkeys(r.transformation for r in table))
    models = list(dict.fromkeys(r.model for r in table))
    width = 0.8 / (2 * len(models))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(transformations)), 4))
    for m, model in enumerate(models):
        by_t = {r.transformation: r for r in table if r.model == model}
        for k, (field, label) in enumerate((("success_rate", "success"), ("faster_rate", "faster"))):
            xs = [i + (2 * m + k) * width for i in range(len(transformations))]
            ys = [getattr(by_t[t], field) if t in by_t else 0 for t in transformations]
            ax.bar(xs, ys, width, label=f"{model}: {label}")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(transformations))], transformations, rotation=30,
                  ha="right", fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of runs")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write(cells: list[CellResult], out: Path) -> dict[str, Path]:
    """report.md, report.csv, attempts.csv, report.json and report.png under out (plain cells); for sequence runs
    sequences.csv, sequences.json and sequences.png too, their table in report.md."""
    table = rows([c for c in cells if c.sequence is None])
    steps = sequence_report.rows(cells)
    paths = {"markdown": out / "report.md", "csv": out / "report.csv", "attempts": out / "attempts.csv",
             "json": out / "report.json", "png": out / "report.png", "sequences_csv": out / "sequences.csv",
             "sequences_json": out / "sequences.json", "sequences_png": out / "sequences.png"}
    text = markdown(table) if table or not steps else ""
    if steps:
        sequence_report.plot(steps, paths["sequences_png"])
        paths["sequences_csv"].write_text(sequence_report.csv_text(steps))
        paths["sequences_json"].write_text(json.dumps({"steps": [r.model_dump() for r in steps],
                                                       "runs": sequence_report.points(cells)}, indent=2) + "\n")
        text += ("\n" if text else "") + sequence_report.markdown(steps, paths["sequences_png"].name)
    paths["markdown"].write_text(text)
    paths["csv"].write_text(csv_text(table))
    paths["attempts"].write_text(attempts_csv(cells))
    paths["json"].write_text(json.dumps({"rows": [r.model_dump() for r in table], "totals": totals(table)},
                                        indent=2) + "\n")
    if table:
        plot(table, paths["png"])
    return paths
