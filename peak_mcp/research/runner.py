"""The experiment run: connect to the server as an MCP client whose sampling callback is the model, start one
session, and call apply_transformation from the base version for every transformation x repeat not yet finished.
Each finished cell is one line of results.jsonl (its attempts inside it), written when the cell ends, so a crash
loses at most the cell under way and a re-run skips what is there."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcp import Client, MCPError, StdioServerParameters
from pydantic import BaseModel, Field

from peak_mcp.research.exchange import FolderExchange
from peak_mcp.research.exchanges import Backend, Exchange, Recorder
from peak_mcp.research.outcomes import outcome
from peak_mcp.research.replay import Replay
from peak_mcp.research.spec import ExperimentSpec, ModelSpec

RESULTS = "results.jsonl"
EXCHANGES = "exchanges.jsonl"
# v0 statuses apply_transformation refuses as a base (peak_mcp/loop/apply.py: passing or compiled only)
BASE_REFUSED = frozenset({"pending", "invalid_annotation", "invalid_reply", "compile_error", "failed", "error"})


class ExperimentError(RuntimeError):
    pass


class AttemptRow(BaseModel):
    attempt: int
    version: int | None
    status: str
    failure: str | None
    outcome: str
    median_ms: float | None = None
    speedup_vs_base: float | None = None
    request_chars: int | None = None
    reply_chars: int | None = None
    reply_tokens: int | None = None
    model_s: float | None = Field(None, description="seconds the model took to reply")


class CellResult(BaseModel):
    model: str
    transformation: str
    repeat: int
    session_id: str
    base_version: int
    finished: bool = Field(description="the run ended on its own; not when the model gave no reply or the tool "
                                       "failed (a re-run tries such a cell again)")
    succeeded: bool = False
    speed: str | None = None
    faster: bool = False
    resolved_transformation: str | None = None
    result_version: int | None = None
    result_ms: float | None = None
    attempts: list[AttemptRow] = Field(default_factory=list)
    wall_s: float
    error: str | None = None

    @property
    def coordinates(self) -> tuple[str, str, int]:
        return (self.model, self.transformation, self.repeat)


def make_backend(model: ModelSpec) -> Backend:
    if model.backend == "exchange":
        if model.folder is None:
            raise ExperimentError("the exchange backend needs model.folder")
        return FolderExchange(model.folder, model.timeout_s, model.poll_s)
    if model.recording is None or not model.recording.exists():
        raise ExperimentError(f"the replay backend needs model.recording, an exchanges.jsonl ({model.recording})")
    return Replay(model.recording)


def stdio_server(data_dir: Path | None) -> StdioServerParameters:
    """`python -m peak_mcp serve` as a child over stdio (the server in a process of its own)."""
    args = ["-m", "peak_mcp", "serve"] + (["--data-dir", str(data_dir)] if data_dir else [])
    return StdioServerParameters(command=sys.executable, args=args)


def read_results(out: Path) -> list[CellResult]:
    path = out / RESULTS
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(CellResult.model_validate_json(line))
        except ValueError:  # a torn last line: that cell runs again
            continue
    return rows


def attempt_rows(step: dict[str, Any], exchanges: list[Exchange]) -> list[AttemptRow]:
    """The run's attempts beside the exchanges that produced them, in order (attempt n answered request n)."""
    answered = [e for e in exchanges if e.reply is not None]
    rows = []
    for n, report in enumerate(step.get("attempts") or [], start=1):
        perf = report.get("performance") or {}
        exchange = answered[n - 1] if n <= len(answered) else None
        rows.append(AttemptRow(
            attempt=n, version=report.get("version"), status=report.get("status", ""), failure=report.get("failure"),
            outcome=outcome(report), median_ms=perf.get("median_ms"), speedup_vs_base=perf.get("speedup_vs_parent"),
            request_chars=exchange.request.chars if exchange else None,
            reply_chars=len(exchange.reply or "") if exchange else None,
            reply_tokens=exchange.reply_tokens if exchange else None,
            model_s=round(exchange.seconds, 3) if exchange else None))
    return rows


async def run_experiment(spec: ExperimentSpec, out: Path, target: Any,
                         progress: Callable[[str], None] = lambda line: None) -> list[CellResult]:
    """Every cell of the plan not finished in `out` yet; returns every finished cell (earlier runs' too).
    `target` is what mcp.Client connects to: an MCPServer in-process, StdioServerParameters, or a URL."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.json").write_text(spec.model_dump_json(indent=2) + "\n")
    finished = {c.coordinates for c in read_results(out) if c.finished}
    todo = [(t, r) for t in spec.transformations for r in range(1, spec.repeats + 1)
            if (spec.model.label, t, r) not in finished]
    if not todo:
        progress("every cell is finished")
        return [c for c in read_results(out) if c.finished]
    recorder = Recorder(make_backend(spec.model), out / EXCHANGES)
    refused: ExperimentError | None = None
    async with Client(target, sampling_callback=recorder) as client:
        try:  # raised inside, it would leave Client's task group wrapped in an ExceptionGroup
            session = spec.session_id or await _start(client, spec)
            progress(f"session {session}: {len(todo)} cells to run, {len(finished)} finished before")
        except ExperimentError as exc:
            refused, todo = exc, []
        for transformation, repeat in todo:
            recorder.begin(spec.model.label, transformation, repeat)
            began = time.monotonic()
            try:
                answer = await client.call_tool("apply_transformation", {
                    "session_id": session, "transformation": transformation, "version": spec.base_version,
                    "max_attempts": spec.max_attempts})
            except MCPError as exc:  # the model refused (input-required rounds raise it here): not finished
                answer = exc
            cell = _cell(spec, session, transformation, repeat, answer, recorder.exchanges,
                         time.monotonic() - began)
            with (out / RESULTS).open("a") as results:
                results.write(cell.model_dump_json() + "\n")
            progress(f"{transformation} #{repeat}: " + (
                "succeeded" if cell.succeeded else "failed" if cell.finished else f"unfinished ({cell.error})") +
                f" after {len(cell.attempts)} attempt(s), " + " ".join(a.outcome for a in cell.attempts) +
                f" ({cell.wall_s:.0f} s)")
    if refused is not None:
        raise refused
    return [c for c in read_results(out) if c.finished]


async def _start(client: Client, spec: ExperimentSpec) -> str:
    started = await client.call_tool("start_session", {
        "problem": spec.problem, "backend": spec.backend, "dtype": spec.dtype, "sizes": spec.sizes,
        "label": f"experiment {spec.model.label}"})
    if started.is_error:
        raise ExperimentError(f"start_session failed: {started.content[0].text}")
    info = started.structured_content
    v0 = info.get("version_0") or {}
    if v0.get("status") in BASE_REFUSED:  # every cell would fail alike: say why once, run none
        raise ExperimentError(f"session {info['session_id']}: version 0 has status {v0['status']} "
                              f"({v0.get('failure')}: {(v0.get('message') or '')[:300]}); "
                              "apply_transformation needs a passing base")
    return info["session_id"]


def _cell(spec: ExperimentSpec, session: str, transformation: str, repeat: int, answer: Any,
          exchanges: list[Exchange], wall_s: float) -> CellResult:
    base = dict(model=spec.model.label, transformation=transformation, repeat=repeat, session_id=session,
                base_version=spec.base_version, wall_s=round(wall_s, 3))
    if isinstance(answer, MCPError) or answer.is_error:
        error = str(answer) if isinstance(answer, MCPError) else answer.content[0].text
        return CellResult(**base, finished=False, error=error[:500])
    step = answer.structured_content or {}
    declined = next((e.error for e in exchanges if e.error), None)
    attempts = attempt_rows(step, exchanges)
    last = (step.get("attempts") or [{}])[-1]
    succeeded = bool(step.get("succeeded"))
    return CellResult(
        **base, finished=bool(step.get("done")) and declined is None, succeeded=succeeded, speed=step.get("speed"),
        faster=succeeded and (step.get("speed") or "").startswith("faster"),
        resolved_transformation=step.get("resolved_transformation"), result_version=step.get("result"),
        result_ms=(last.get("performance") or {}).get("median_ms") if succeeded else None,
        attempts=attempts, error=declined)

