"""A batch's result as Markdown: one row per problem, then fast_p. Text from kernels and problem files (messages,
names) is escaped and kept to one line, so that none of it can forge a row."""

from __future__ import annotations

from peak_mcp.core.text import printable
from peak_mcp.loop.batch import BatchResult, ProblemResult

VERDICT_CHARS = 100


def _cell(text: str | None, limit: int = VERDICT_CHARS) -> str:
    line = printable(" ".join((text or "").split())).replace("|", "\\|")
    return line if len(line) <= limit else line[:limit - 1] + "…"


def _times(value: float | None, digits: str = ".4g") -> str:
    return "" if value is None else format(value, digits)


def _speedup(row: ProblemResult, value: float | None, notes: dict[str, int]) -> str:
    """The speedup, or for a timed kernel without one "n/a [k]": note k, under the table, says why."""
    if value is not None:
        return f"{value:.2f}×"
    if row.kernel_ms is None:
        return ""
    why = row.yardstick_note or "no torch time"
    return f"n/a [{notes.setdefault(why, len(notes) + 1)}]"


def verdict(row: ProblemResult) -> str:
    """What became of the problem, naming the fault where there is one."""
    if row.outcome == "correct":
        return "correct"
    if row.outcome == "missing_kernel":
        return f"missing kernel: {_cell(row.message)}"
    if row.outcome == "not_run":
        return "compiled, not run (no device)"
    if row.outcome == "error" and row.status is None:  # nothing was submitted: the problem or session failed
        return f"error: {_cell(row.message)}"
    first = (row.message or "").strip().splitlines()[0] if (row.message or "").strip() else ""
    kind = row.failure or row.status or row.outcome
    return f"{row.outcome}: {_cell(kind, 40)}" + (f": {_cell(first)}" if first else "")


def markdown(result: BatchResult) -> str:
    lines = [f"# Batch: {len(result.problems)} problems, {result.backend} {result.dtype} on "
             f"{', '.join(result.devices)} ({result.seconds:.0f} s)", "",
             "| problem | correct | verdict | kernel ms | torch eager ms | torch.compile ms | × eager | × compile |",
             "|---|---|---|---|---|---|---|---|"]
    notes: dict[str, int] = {}
    for r in result.problems:
        correct = "?" if r.correct is None else "yes" if r.correct else "no"
        lines.append(f"| {_cell(r.problem, 48)} | {correct} | {verdict(r)} | {_times(r.kernel_ms)} | "
                     f"{_times(r.torch_eager_ms)} | {_times(r.torch_compile_ms)} | "
                     f"{_speedup(r, r.speedup_eager, notes)} | {_speedup(r, r.speedup_compile, notes)} |")
    if notes:
        lines += [""] + [f"[{k}] {_cell(why, 300)}" for why, k in notes.items()]
    lines += ["", "| fast_p | value | correct and faster | note |", "|---|---|---|---|"]
    for f in result.fast_p:
        value = "n/a" if f.value is None else f"{f.value:.2f}"
        lines.append(f"| fast_{f.p:g} | {value} | {f.faster} of {f.total} | {_cell(f.note, 300)} |")
    counts = ", ".join(f"{k}: {v}" for k, v in sorted(result.counts.items()))
    lines += ["", f"Outcomes: {counts}. {result.timing_note}.", ""]
    return "\n".join(lines)
