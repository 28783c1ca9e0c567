"""The experiment run: connect to the server as an MCP client whose sampling callback is the model, start one
session (or go on in the earlier results' one), and call apply_transformation from the base version for every
transformation x repeat not yet finished, then along every sequence x repeat: step k transforms what the run holds
(the last version a step of it made that passed, at first the base). Each finished cell or step is one line of
results.jsonl (its attempts inside it), written when it ends, so a crash loses at most the one under way and a
re-run skips what is there; a sequence run goes on at its first unfinished step from the version it held.
With spec.parallel n, n sessions (each its own client and recorder: a recorder numbers one cell's attempts) pull
cells and sequence runs from one queue; a sequence run stays in its session (its versions live there), a resumed
one goes to the session its finished steps name. Every line is one append, so the sessions share both files."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
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
    # a sequence run's step; None on a plain cell (every one transforms base_version)
    sequence: int | None = Field(None, description="which sequence of the plan, from 1")
    step: int | None = Field(None, description="which step of it, from 1")
    parent: int | None = Field(None, description="the version this step transformed: the run's last passing one")
    parent_ms: float | None = None
    base_ms: float | None = Field(None, description="base_version's median time, what speedup_vs_v0 divides")
    speedup_vs_v0: float | None = Field(None, description="base_ms / result_ms, where the step passed")
    speedup_vs_parent: float | None = Field(None, description="the server's ratio against the parent, where passed")
    held_version: int | None = Field(None, description="what the run holds after the step: its result where it "
                                                       "passed (benchmarked), else parent")
    held_ms: float | None = None
    held_speedup_vs_v0: float | None = Field(None, description="base / held: from the retimed pair where the "
                                                                "spec retimes, else from base_ms and held_ms")
    retimed_ms: float | None = Field(None, description="the result timed again right after the step (retime)")
    retimed_base_ms: float | None = Field(None, description="base_version timed right after retimed_ms")

    @property
    def coordinates(self) -> tuple[str, str, int, int | None, int | None]:
        return (self.model, self.transformation, self.repeat, self.sequence, self.step)

    @property
    def passed(self) -> bool:
        """Ended with a timed correct kernel: what the next step of a sequence transforms."""
        return self.succeeded and self.result_version is not None and self.result_ms is not None


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


@dataclass
class _Worker:
    """One session of the run and the client that drives it."""

    client: Client
    recorder: Recorder
    session: str = ""
    base_ms: float | None = None


async def run_experiment(spec: ExperimentSpec, out: Path, target: Any,
                         progress: Callable[[str], None] = lambda line: None) -> list[CellResult]:
    """Every cell and sequence step of the plan not finished in `out` yet; returns every finished one (earlier
    runs' too). `target` is what mcp.Client connects to: an MCPServer in-process, StdioServerParameters, or a URL."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.json").write_text(spec.model_dump_json(indent=2) + "\n")
    done = [c for c in read_results(out) if c.finished]
    finished = {c.coordinates for c in done}
    label = spec.model.label
    todo = [(t, r) for t in spec.transformations for r in range(1, spec.repeats + 1)
            if (label, t, r, None, None) not in finished]
    runs = [(s, r) for s, sequence in enumerate(spec.sequences, start=1) for r in range(1, spec.repeats + 1)
            if any((label, t, r, s, k) not in finished for k, t in enumerate(sequence, start=1))]
    if not todo and not runs:
        progress("every cell is finished")
        return finished_cells(out)
    pins = {} if spec.session_id else _pins(spec, done, runs)
    backends = [make_backend(spec.model) for _ in range(spec.parallel)]  # refused here, before any connection
    refused: ExperimentError | None = None
    async with AsyncExitStack() as stack:
        try:  # raised inside, it would leave Client's task group wrapped in an ExceptionGroup
            workers = await _workers(stack, spec, out, target, backends, done, pins)
            names = ", ".join(w.session for w in workers)
            progress(f"session{'s' if len(workers) > 1 else ''} {names}: {len(todo)} cells and {len(runs)} sequence "
                     f"runs to run, {len(done)} finished before")
        except ExperimentError as exc:
            refused = exc
        if refused is None:
            queue: list[tuple[int | None, int, str | None]] = (
                [(None, i, None) for i in range(len(todo))] + [(s, r, pins.get((s, r))) for s, r in runs])
            async with anyio.create_task_group() as group:
                for worker in workers:
                    group.start_soon(_work, worker, queue, spec, todo, done, out, progress)
    if refused is not None:
        raise refused
    return finished_cells(out)


def _finished_steps(done: list[CellResult], label: str, s: int, repeat: int) -> dict[int | None, CellResult]:
    """A sequence run's finished steps, by step number."""
    return {c.step: c for c in done if c.model == label and c.sequence == s and c.repeat == repeat}


def _pins(spec: ExperimentSpec, done: list[CellResult], runs: list[tuple[int, int]]) -> dict[tuple[int, int], str]:
    """(sequence, repeat) -> the session of a run's finished first step: it goes on there from its versions."""
    pins = {}
    for s, repeat in runs:
        held = _finished_steps(done, spec.model.label, s, repeat)
        if 1 in held and held[1].transformation == spec.sequences[s - 1][0]:
            pins[s, repeat] = held[1].session_id
    return pins


async def _workers(stack: AsyncExitStack, spec: ExperimentSpec, out: Path, target: Any, backends: list[Backend],
                   done: list[CellResult], pins: dict[tuple[int, int], str]) -> list[_Worker]:
    """The run's sessions, each with its client: spec.session_id for all; else the sessions resumed sequence runs
    name (each must still be on the server), then the earlier results' latest that are, then new ones, session i
    on the backend's device i % their number. Sessions start side by side, so version 0 is timed once per device."""

    async def connect(backend: Backend) -> _Worker:
        recorder = Recorder(backend, out / EXCHANGES)
        return _Worker(await stack.enter_async_context(Client(target, sampling_callback=recorder)), recorder)

    first = await connect(backends[0])
    if spec.session_id:
        sessions = [spec.session_id] * spec.parallel
    else:
        sessions = list(dict.fromkeys(pins.values()))
        for session in sessions:
            if await _median_ms(first.client, session, spec.base_version, missing_ok=True) == "missing":
                raise ExperimentError(f"session {session} of the earlier results is not on this server, and "
                                      "sequence runs there go on from its versions: run with the data dir it was "
                                      "made in")
        for c in reversed(done):
            if len(sessions) >= spec.parallel:
                break
            if c.session_id not in sessions and await _median_ms(
                    first.client, c.session_id, spec.base_version, missing_ok=True) != "missing":
                sessions.append(c.session_id)
    count = max(spec.parallel, len(sessions))
    workers = [first] + [await connect(backends[i] if i < len(backends) else make_backend(spec.model))
                         for i in range(1, count)]
    devices = await _devices(first.client, spec.backend) if spec.parallel > 1 and len(sessions) < count else []
    problems: list[ExperimentError] = []

    async def ready(i: int, worker: _Worker) -> None:
        try:
            worker.session = sessions[i] if i < len(sessions) else await _start(
                worker.client, spec, devices[i % len(devices)] if devices else None)
            worker.base_ms = await _median_ms(worker.client, worker.session, spec.base_version)
        except ExperimentError as exc:
            problems.append(exc)

    async with anyio.create_task_group() as group:
        for i, worker in enumerate(workers):
            group.start_soon(ready, i, worker)
    if problems:  # every session runs the same plan: one base that did not pass stops the run before any cell
        raise problems[0]
    return workers


async def _devices(client: Client, backend: str) -> list[int]:
    """The backend's device indices as the server's doctor lists them (none found: the server's default)."""
    answer = await client.call_tool("doctor", {})
    if answer.is_error:
        return []
    report = answer.structured_content or {}
    found = next((b for b in report.get("backends") or [] if b.get("backend") == backend), {})
    return [int(d["index"]) for d in found.get("devices") or [] if isinstance(d.get("index"), int)]


def _take(queue: list[tuple[int | None, int, str | None]], session: str) -> tuple[int | None, int] | None:
    """The first work item this session may run (not pinned to another session), out of the queue. No await
    between looking and removing, so two sessions never take one item."""
    for n, (sequence, index, pin) in enumerate(queue):
        if pin is None or pin == session:
            del queue[n]
            return sequence, index
    return None


async def _work(worker: _Worker, queue: list[tuple[int | None, int, str | None]], spec: ExperimentSpec,
                todo: list[tuple[str, int]], done: list[CellResult], out: Path,
                progress: Callable[[str], None]) -> None:
    while (item := _take(queue, worker.session)) is not None:
        sequence, index = item
        if sequence is None:
            transformation, repeat = todo[index]
            cell = await _apply(worker.client, worker.recorder, spec, worker.session, transformation, repeat,
                                spec.base_version)
            _append(out, cell, progress)
        else:
            await _sequence_run(worker, spec, sequence, index, done, out, progress)


async def _sequence_run(worker: _Worker, spec: ExperimentSpec, s: int, repeat: int, done: list[CellResult],
                        out: Path, progress: Callable[[str], None]) -> None:
    session = worker.session
    held = _finished_steps(done, spec.model.label, s, repeat)
    parent, parent_ms, speedup, resumed = spec.base_version, worker.base_ms, 1.0, True
    for k, transformation in enumerate(spec.sequences[s - 1], start=1):
        # finished before, in this session, as a prefix of the run (a step after one run anew transforms another
        # version)
        resumed = (resumed and k in held and held[k].transformation == transformation
                   and held[k].session_id == session)
        if resumed:
            parent, parent_ms, speedup = held[k].held_version, held[k].held_ms, held[k].held_speedup_vs_v0
            continue
        cell = await _apply(worker.client, worker.recorder, spec, session, transformation, repeat, parent, s, k)
        cell = _as_step(cell, parent, parent_ms, worker.base_ms, speedup)
        if spec.retime and cell.passed and cell.result_version is not None:
            cell = await _retimed(worker.client, cell, spec.base_version)
        _append(out, cell, progress)
        if not cell.finished:  # no reply or a tool error: the run cannot say what step k left
            break
        parent, parent_ms, speedup = cell.held_version, cell.held_ms, cell.held_speedup_vs_v0


def finished_cells(out: Path) -> list[CellResult]:
    """The finished cells and steps in `out`, the last of each where one ran again (a sequence edited in place)."""
    latest = {c.coordinates: c for c in read_results(out) if c.finished}
    return list(latest.values())


async def _apply(client: Client, recorder: Recorder, spec: ExperimentSpec, session: str, transformation: str,
                 repeat: int, version: int, sequence: int | None = None, step: int | None = None) -> CellResult:
    recorder.begin(spec.model.label, transformation, repeat, sequence, step)
    began = time.monotonic()
    try:
        answer = await client.call_tool("apply_transformation", {
            "session_id": session, "transformation": transformation, "version": version,
            "max_attempts": spec.max_attempts})
    except MCPError as exc:  # the model refused (input-required rounds raise it here): not finished
        answer = exc
    cell = _cell(spec, session, transformation, repeat, answer, recorder.exchanges, time.monotonic() - began)
    return cell.model_copy(update={"sequence": sequence, "step": step})


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 4) if a and b else None


def _as_step(cell: CellResult, parent: int | None, parent_ms: float | None, base_ms: float | None,
             held_speedup: float | None = None) -> CellResult:
    """The step's figures against the session's start; `held_speedup`: what the run held before the step, kept
    where the step failed (a retimed figure is not mixed with a start-of-session one)."""
    held_version, held_ms = (cell.result_version, cell.result_ms) if cell.passed else (parent, parent_ms)
    last = cell.attempts[-1] if cell.attempts else None
    return cell.model_copy(update=dict(
        parent=parent, parent_ms=parent_ms, base_ms=base_ms,
        speedup_vs_v0=_ratio(base_ms, cell.result_ms) if cell.passed else None,
        speedup_vs_parent=last.speedup_vs_base if cell.passed and last else None,
        held_version=held_version, held_ms=held_ms,
        held_speedup_vs_v0=_ratio(base_ms, held_ms) if cell.passed or held_speedup is None else held_speedup))


async def _retimed(client: Client, cell: CellResult, base: int) -> CellResult:
    """The step's result and the base timed back to back (which goes first alternates with the step, so neither
    side always meets the warmer machine), the speedup over the base taken from that pair. Where either timing
    fails the step keeps its start-of-session figure, and its empty retimed_ms says so."""
    assert cell.result_version is not None
    order = [cell.result_version, base] if (cell.step or 0) % 2 else [base, cell.result_version]
    timed = {v: await _benchmark_ms(client, cell.session_id, v) for v in order}
    result_ms, base_ms = timed[cell.result_version], timed[base]
    if not (result_ms and base_ms):
        return cell
    return cell.model_copy(update=dict(retimed_ms=result_ms, retimed_base_ms=base_ms,
                                       held_speedup_vs_v0=_ratio(base_ms, result_ms)))


async def _benchmark_ms(client: Client, session: str, version: int) -> float | None:
    answer = await client.call_tool("benchmark", {"session_id": session, "version": version})
    if answer.is_error:
        return None
    report = answer.structured_content or {}
    return (report.get("performance") or {}).get("median_ms") if report.get("passed") else None


def _append(out: Path, cell: CellResult, progress: Callable[[str], None]) -> None:
    with (out / RESULTS).open("a") as results:
        results.write(cell.model_dump_json() + "\n")
    where = f"sequence {cell.sequence} step {cell.step} " if cell.sequence is not None else ""
    progress(f"{where}{cell.transformation} #{cell.repeat}: " + (
        "succeeded" if cell.succeeded else "failed" if cell.finished else f"unfinished ({cell.error})") +
        f" after {len(cell.attempts)} attempt(s), " + " ".join(a.outcome for a in cell.attempts) +
        f" ({cell.wall_s:.0f} s)")


async def _median_ms(client: Client, session: str, version: int, missing_ok: bool = False) -> Any:
    """The version's median time (None where it was not timed); with missing_ok, "missing" where the server has no
    such session or version."""
    answer = await client.call_tool("get_version", {"session_id": session, "version": version})
    if answer.is_error:
        if missing_ok:
            return "missing"
        raise ExperimentError(f"get_version({session}, {version}) failed: {answer.content[0].text[:300]}")
    report = (answer.structured_content or {}).get("report") or {}
    return (report.get("performance") or {}).get("median_ms")


async def _start(client: Client, spec: ExperimentSpec, device: int | None = None) -> str:
    started = await client.call_tool("start_session", {
        "problem": spec.problem, "backend": spec.backend, "dtype": spec.dtype, "sizes": spec.sizes,
        "label": f"experiment {spec.model.label}", **({"device": device} if device is not None else {})})
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

