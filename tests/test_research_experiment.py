"""peak_mcp.research: an experiment run through the real in-process MCP server on lavapipe (HLSL matmul), the model
answered by the replay backend (a recording made here from the shipped kernels and broken ones) or by the folder
exchange (a thread writes the reply files); reports, error classes and resume."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import anyio
import pytest

from peak_mcp.research import report
from peak_mcp.research.exchanges import Cell, Exchange, Request, read_exchanges
from peak_mcp.research.outcomes import CORRECT, outcome
from peak_mcp.research.runner import EXCHANGES, RESULTS, read_results, run_experiment
from peak_mcp.research.spec import ExperimentSpec
from tests.conftest import EXAMPLES, has_device, skip_reason

HLSL = EXAMPLES / "hlsl"
TILED = (HLSL / "tiled_groupshared.hlsl").read_text()
BLOCKED = (HLSL / "register_blocked.hlsl").read_text()
GOOD_B = "if (k0 + ty < p.K && col < p.N) b = B[(k0 + ty) * p.N + col];"
WRONG = TILED.replace(GOOD_B, "if (k0 + tx < p.K && col < p.N) b = B[(k0 + tx) * p.N + col];")  # B tile transposed
BROKEN = TILED.replace("float acc", "float acc = missing_symbol +", 1)
SIZES = {"M": 40, "N": 24, "K": 20}
TILING, UNROLL = "hlsl-groupshared-tiling", "loop-unrolling-and-launch-bounds"

def fenced(source: str) -> str:
    return f"Here is the kernel.\n\n```hlsl\n{source}```\n"


def recording(path: Path, replies: dict[tuple[str, int, int], str]) -> Path:
    """An exchanges.jsonl as a run writes it, keyed by cell (the request text is not known before the run)."""
    with path.open("w") as out:
        for (transformation, repeat, attempt), text in replies.items():
            request = Request(messages=[{"role": "user", "text": f"{transformation} {repeat} {attempt}"}],
                              max_tokens=1)
            cell = Cell(model="recorded", transformation=transformation, repeat=repeat, attempt=attempt)
            out.write(Exchange(key=request.key, cell=cell, request=request, reply=text, seconds=0).model_dump_json()
                      + "\n")
    return path


def spec(tmp_path: Path, transformations: list[str], repeats: int, **model) -> ExperimentSpec:
    return ExperimentSpec.model_validate({"backend": "hlsl", "sizes": SIZES, "transformations": transformations,
                                          "repeats": repeats, "max_attempts": 2, "model": model})


def run(settings, plan: ExperimentSpec, out: Path) -> list:
    from peak_mcp.api.app import build

    server, service = build(settings)
    try:
        return anyio.run(run_experiment, plan, out, server)
    finally:
        service.close()


def test_outcome_classes_from_version_reports() -> None:
    assert outcome({"status": "invalid_reply", "failure": "reply_format"}) == "invalid_reply"
    assert outcome({"status": "compile_error", "failure": "compile"}) == "compile_error"
    assert outcome({"status": "failed", "failure": "wrong_result"}) == "wrong_result"
    assert outcome({"status": "failed", "failure": "timeout"}) == "timeout"
    assert outcome({"status": "failed", "failure": "kernel_fault"}) == "fault"
    assert outcome({"status": "not_general", "failure": "generality_wrong_result"}) == "not_general"
    assert outcome({"status": "benchmarked", "performance": {"change_vs_parent": "faster beyond noise"}}) == "faster"
    assert outcome({"status": "benchmarked", "performance": {"change_vs_parent": "within noise"}}) == "noise"
    assert outcome({"status": "benchmarked", "performance": {"change_vs_parent": "slower beyond noise"}}) == "slower"
    assert outcome({"status": "compiled"}) == "compiled_only"


@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
def test_replayed_experiment_reports_success_rates_and_error_classes_and_resumes(settings, tmp_path: Path) -> None:
    """2 transformations x 2 repeats: tiling succeeds twice (once after a wrong result), unrolling once (the other
    run: a compile error, then a wrong result). A re-run after losing the last cell runs that cell alone."""
    recorded = recording(tmp_path / "recorded.jsonl", {
        (TILING, 1, 1): fenced(TILED),
        (TILING, 2, 1): fenced(WRONG), (TILING, 2, 2): fenced(TILED),
        (UNROLL, 1, 1): fenced(BROKEN), (UNROLL, 1, 2): fenced(WRONG),
        (UNROLL, 2, 1): fenced(BLOCKED)})
    plan = spec(tmp_path, [TILING, UNROLL], 2, label="recorded", backend="replay", recording=str(recorded))
    out = tmp_path / "run"
    cells = run(settings, plan, out)
    assert [(c.transformation, c.repeat, c.succeeded, len(c.attempts)) for c in cells] == [
        (TILING, 1, True, 1), (TILING, 2, True, 2), (UNROLL, 1, False, 2), (UNROLL, 2, True, 1)]
    assert all(c.finished and c.base_version == 0 for c in cells)
    table = {r.transformation: r for r in report.rows(cells)}
    assert (table[TILING].runs, table[TILING].success_rate, table[TILING].first_try_rate) == (2, 1.0, 0.5)
    assert (table[UNROLL].runs, table[UNROLL].success_rate) == (2, 0.5)
    failures = {k: v for k, v in table[UNROLL].classes.items() if k not in CORRECT}
    assert failures == {"compile_error": 1, "wrong_result": 1}
    assert {k: v for k, v in table[TILING].classes.items() if k not in CORRECT} == {"wrong_result": 1}
    assert sum(table[TILING].classes[k] for k in CORRECT if k in table[TILING].classes) == 2
    first = cells[0].attempts[0]
    assert first.reply_chars == len(fenced(TILED)) and first.request_chars > 1000  # the real brief was sent
    assert first.median_ms and first.speedup_vs_base and first.version is not None
    # every exchange was recorded, replayed by cell (the recording's request text is not the brief)
    exchanges = read_exchanges(out / EXCHANGES)
    assert len(exchanges) == 6 and {e.note for e in exchanges} == {"replayed by cell"}

    paths = report.write(cells, out)
    assert "| recorded | hlsl-groupshared-tiling | 2 | 100% (2/2) | 50% |" in paths["markdown"].read_text()
    assert "compile_error 1" in paths["markdown"].read_text()
    assert json.loads(paths["json"].read_text())["totals"]["recorded"]["success_rate"] == 0.75
    assert paths["csv"].read_text().splitlines()[0].startswith("model,transformation,runs,succeeded,success_rate")
    assert len(paths["attempts"].read_text().splitlines()) == 1 + 6
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"

    # A crash during the last cell: its line never written. The re-run starts that cell only, here in the first
    # run's session (the server on the same data dir keeps it).
    lines = (out / RESULTS).read_text().splitlines()
    (out / RESULTS).write_text("\n".join(lines[:-1]) + "\n")
    again = run(settings, plan.model_copy(update={"session_id": cells[0].session_id}), out)
    assert again[-1].session_id == cells[0].session_id
    assert [(c.transformation, c.repeat, c.succeeded) for c in again] == [
        (TILING, 1, True), (TILING, 2, True), (UNROLL, 1, False), (UNROLL, 2, True)]
    new = read_exchanges(out / EXCHANGES)[6:]
    assert [(e.cell.transformation, e.cell.repeat) for e in new] == [(UNROLL, 2)]
    assert len(read_results(out)) == 4


@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
def test_folder_exchange_is_the_model_and_an_unanswered_cell_runs_again(settings, tmp_path: Path) -> None:
    """A thread plays the model: it answers request-1 with the shipped register-blocked kernel and leaves the second
    cell's request unanswered (the run gives up after its timeout: that cell is not finished). The re-run asks again
    (request-3, numbered on) and the thread answers; the first cell is not run again."""
    folder = tmp_path / "exchange"
    answered: list[dict] = []
    stop = threading.Event()

    def model(answer: set[int]) -> None:
        while not stop.is_set():
            for path in sorted(folder.glob("request-*.json")):
                n = int(path.stem.split("-")[1])
                if n in answer and not (folder / f"reply-{n}.txt").exists():
                    answered.append(json.loads(path.read_text()))
                    (folder / f"reply-{n}.tmp").write_text(fenced(BLOCKED))
                    (folder / f"reply-{n}.tmp").rename(folder / f"reply-{n}.txt")
            time.sleep(0.05)

    plan = spec(tmp_path, [TILING], 2, label="person", backend="exchange", folder=str(folder), timeout_s=3,
                poll_s=0.05)
    out = tmp_path / "run"
    worker = threading.Thread(target=model, args=({1, 3},), daemon=True)
    worker.start()
    try:
        cells = run(settings, plan, out)
        assert [(c.repeat, c.succeeded) for c in cells] == [(1, True)]
        request = answered[0]
        assert request["cell"] == {"model": "person", "transformation": TILING, "repeat": 1, "attempt": 1}
        assert request["max_tokens"] > 0 and request["system_prompt"]
        assert "```hlsl" in request["messages"][-1]["text"] or "hlsl" in request["messages"][-1]["text"]
        unfinished = [c for c in read_results(out) if not c.finished]
        assert len(unfinished) == 1 and "NoReply" in (unfinished[0].error or "")
        assert (folder / "request-2.json").exists() and not (folder / "reply-2.txt").exists()

        again = run(settings, plan, out)
        assert [(c.repeat, c.succeeded) for c in again] == [(1, True), (2, True)]
        assert [a["n"] for a in answered] == [1, 3]
        assert [a["cell"]["repeat"] for a in answered] == [1, 2]
    finally:
        stop.set()
        worker.join(5)


def test_replay_finds_a_reply_by_cell_then_by_the_request_text(tmp_path: Path) -> None:
    """A re-run of the plan is answered by cell (its brief quotes new times); a request of another cell that asks
    exactly what was asked is answered by its hash; one never recorded is refused."""
    from peak_mcp.research.replay import NotRecorded, Replay

    replay = Replay(recording(tmp_path / "r.jsonl", {(TILING, 1, 1): "first", (TILING, 1, 2): "second"}))
    asked = Request(messages=[{"role": "user", "text": f"{TILING} 1 2"}], max_tokens=1)  # what (1, 2) was asked
    other = Request(messages=[{"role": "user", "text": "a brief with new times"}], max_tokens=1)

    def answer(request: Request, repeat: int, attempt: int):
        cell = Cell(model="recorded", transformation=TILING, repeat=repeat, attempt=attempt)
        return anyio.run(replay, request, cell)

    assert (answer(other, 1, 1).text, answer(other, 1, 1).note) == ("first", "replayed by cell")
    assert (answer(asked, 5, 1).text, answer(asked, 5, 1).note) == ("second", "replayed by hash")
    with pytest.raises(NotRecorded, match="repeat 5 attempt 1"):
        answer(other, 5, 1)


def test_a_base_that_did_not_pass_stops_the_run_before_any_cell(settings, tmp_path: Path) -> None:
    """Two experiments on one data dir: the second server's v0 cannot take the lavapipe device (device_busy). The
    run says so once and runs no cell, instead of recording every cell as an apply_transformation error."""
    from peak_mcp.research.runner import ExperimentError
    from peak_mcp.runner.ownership import DeviceLocks

    held = DeviceLocks(settings.data_dir / "locks")
    held.acquire("hlsl", 0)  # what the other experiment's server holds for its life
    folder, out = tmp_path / "exchange", tmp_path / "run"
    plan = spec(tmp_path, [TILING, UNROLL], 2, label="person", backend="exchange", folder=str(folder), timeout_s=3)
    try:
        with pytest.raises(ExperimentError, match=r"version 0 has status error \(device_busy"):
            run(settings, plan, out)
    finally:
        held.release_all()
    assert not (out / RESULTS).exists() and not list(folder.glob("request-*.json"))
