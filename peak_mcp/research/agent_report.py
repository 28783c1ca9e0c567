"""What `peak-mcp agent` prints at its end and writes with --report-dir (agent-report.json, agent-report.md): the best
version, its time and speedup over v0, its lineage back to v0, every tool call the model made with its outcome, and
why the run stopped. Built from the server's history, never from what the model says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from peak_mcp.research.agent_budget import Tracker, Tried

ROW_KEYS = ("version", "parent", "origin", "transformation", "status", "failure", "median_ms", "speedup_vs_parent",
            "speedup_vs_v0", "pct_of_roofline", "pct_of_vendor")


class AgentReport(BaseModel):
    model: str
    session_id: str
    problem: str
    backend: str
    dtype: str
    sizes: dict[str, int]
    device: str
    stop_reason: str
    versions_made: int
    model_requests: int
    wall_s: float = Field(description="time the run's processes took, all parts together")
    parts: int = Field(1, description="processes the run took (a run resumed from its saved state takes several)")
    v0_ms: float | None = None
    best: dict[str, Any] | None = Field(None, description="the fastest general version (history's best)")
    lineage: list[dict[str, Any]] = Field(default_factory=list, description="v0 first, the best version last")
    tried: list[Tried] = Field(default_factory=list)
    final_text: str | None = Field(None, description="the model's last words, when it stopped by itself")

    def markdown(self) -> str:
        sizes = ",".join(f"{k}={v}" for k, v in self.sizes.items())
        lines = [f"# peak-mcp agent: {self.problem} {self.backend} {self.dtype} {sizes} on {self.device}", "",
                 f"- model: {self.model}; session {self.session_id}",
                 f"- stopped: {self.stop_reason}",
                 f"- {self.versions_made} version(s) made, {self.model_requests} model request(s), "
                 f"{self.wall_s:.0f} s" + (f" in {self.parts} parts" if self.parts > 1 else "")]
        if self.best is None:
            lines.append("- best: none (no general version was timed)")
        else:
            b = self.best
            speed = f", {b['speedup_vs_v0']:.2f}x v0" if b.get("speedup_vs_v0") else ""
            v0 = f" (v0 {self.v0_ms:.4g} ms)" if self.v0_ms else ""
            lines.append(f"- best: v{b['version']}, {_ms(b.get('median_ms'))}{speed}{v0}")
            lines.append("- lineage: " + " -> ".join(
                f"v{r['version']}" + (f" ({r['transformation']})" if r.get("transformation") else "")
                for r in self.lineage))
        lines += ["", "| # | tool | arguments | outcome |", "|---|---|---|---|"]
        for n, t in enumerate(self.tried, start=1):
            args = ", ".join(f"{k}={v}" for k, v in t.args.items() if k != "session_id")
            lines.append(f"| {n} | {t.tool} | {_cell(args)} | {_cell(_outcome(t))} |")
        if self.final_text:
            lines += ["", "Model's last words:", "", "> " + self.final_text.strip().replace("\n", "\n> ")]
        return "\n".join(lines) + "\n"


def _ms(value: float | None) -> str:
    return "untimed" if value is None else f"{value:.4g} ms"


def _cell(text: str) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= 160 else text[:157] + "..."


def _outcome(t: Tried) -> str:
    if t.refused:
        return f"refused: {t.refused}"
    if t.error:
        return f"error: {t.error}"
    if not t.versions:
        return "answered"
    return "; ".join(f"v{v['version']} {v.get('status')}" + (f" ({v['failure']})" if v.get("failure") else "")
                     + (f" {_ms(v.get('median_ms'))}" if v.get("median_ms") else "") for v in t.versions)


def lineage(rows: list[dict[str, Any]], version: int | None) -> list[dict[str, Any]]:
    by_number = {r["version"]: r for r in rows}
    chain: list[dict[str, Any]] = []
    while version is not None and version in by_number and len(chain) <= len(rows):
        row = by_number[version]
        chain.append({k: row.get(k) for k in ROW_KEYS if row.get(k) is not None})
        version = row.get("parent")
    return chain[::-1]


def build(tracker: Tracker, model: str, stop_reason: str, requests: int, final_text: str | None,
          parts: int = 1) -> AgentReport:
    h = tracker.history
    rows = h.get("rows", [])
    best = tracker.best_row()
    v0 = next((r for r in rows if r["version"] == 0), {})
    return AgentReport(
        model=model, session_id=h["session_id"], problem=h["problem"], backend=h["backend"], dtype=h["dtype"],
        sizes=h["sizes"], device=h["device"], stop_reason=stop_reason, versions_made=tracker.made,
        model_requests=requests, wall_s=round(tracker.minutes() * 60, 1), parts=parts, v0_ms=v0.get("median_ms"),
        best={k: best.get(k) for k in ROW_KEYS if best.get(k) is not None} if best else None,
        lineage=lineage(rows, best["version"]) if best else [], tried=tracker.tried, final_text=final_text)


def write(report: AgentReport, folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"json": folder / "agent-report.json", "markdown": folder / "agent-report.md"}
    paths["json"].write_text(report.model_dump_json(indent=2) + "\n")
    paths["markdown"].write_text(report.markdown())
    return paths
