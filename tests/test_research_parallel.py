"""peak_mcp.research with `parallel`: several sessions of one in-process server, each its own MCP client and
recorder, pull the plan's cells and sequence runs from one queue (lavapipe, HLSL matmul, the model a replay of the
shipped kernels); a sequence run stays in its session, and a resumed one goes on in the session its steps name. The
folder exchange's numbers, claimed by many writers at once, are never handed out twice."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import anyio
import pytest
from pydantic import ValidationError

from peak_mcp.research import report
from peak_mcp.research.exchanges import Cell, Request, read_exchanges
from peak_mcp.research.runner import EXCHANGES, RESULTS, read_results
from peak_mcp.research.spec import ExperimentSpec
from tests.conftest import EXAMPLES, has_device, skip_reason
from tests.test_research_experiment import run
from tests.test_research_sequences import write_recording

HLSL = EXAMPLES / "hlsl"
TILED = (HLSL / "tiled_groupshared.hlsl").read_text()
BLOCKED = (HLSL / "register_blocked.hlsl").read_text()
GOOD_B = "if (k0 + ty < p.K && col < p.N) b = B[(k0 + ty) * p.N + col];"
WRONG = TILED.replace(GOOD_B, "if (k0 + tx < p.K && col < p.N) b = B[(k0 + tx) * p.N + col];")  # B tile transposed
SIZES = {"M": 40, "N": 24, "K": 20}
TILING, UNROLL = "hlsl-groupshared-tiling", "loop-unrolling-and-launch-bounds"
MODEL = "recorded"


def fenced(source: str) -> str:
    return f"Here is the kernel.\n\n```hlsl\n{source}```\n"


# (transformation, sequence, step, repeat, attempt) -> reply. TILING repeat 2 needs a second attempt: were the
# sessions' recorders one, another cell's request would take its attempt number and the replay would not match.
REPLIES = {
    (TILING, None, None, 1, 1): fenced(TILED),
    (TILING, None, None, 2, 1): fenced(WRONG), (TILING, None, None, 2, 2): fenced(TILED),
    (UNROLL, None, None, 1, 1): fenced(BLOCKED), (UNROLL, None, None, 2, 1): fenced(BLOCKED),
    (TILING, 1, 1, 1, 1): fenced(TILED), (UNROLL, 1, 2, 1, 1): fenced(BLOCKED),
    (TILING, 1, 1, 2, 1): fenced(TILED), (UNROLL, 1, 2, 2, 1): fenced(BLOCKED)}


def test_parallel_is_bounded_and_needs_the_in_process_server() -> None:
    model = {"label": "m", "backend": "replay", "recording": "r.jsonl"}
    assert ExperimentSpec.model_validate({"transformations": [TILING], "model": model}).parallel == 1
    assert ExperimentSpec.model_validate({"transformations": [TILING], "model": model, "parallel": 8}).parallel == 8
    for bad in (0, 65):
        with pytest.raises(ValidationError):
            ExperimentSpec.model_validate({"transformations": [TILING], "model": model, "parallel": bad})
    with pytest.raises(ValidationError, match="in-process"):
        ExperimentSpec.model_validate({"transformations": [TILING], "model": model, "parallel": 2,
                                       "server": "stdio"})


@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
def test_doctor_lists_the_backends_devices(make_client) -> None:
    from peak_mcp.research.runner import _devices

    async def go() -> list[int]:
        async with make_client() as (client, _):
            return await _devices(client, "hlsl")

    found = anyio.run(go)
    assert found and all(isinstance(i, int) and i >= 0 for i in found)


@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
def test_two_sessions_share_the_plan_and_a_sequence_run_stays_in_its_session(settings, tmp_path: Path) -> None:
    """parallel 2 over 4 plain cells and a 2-step sequence x 2 repeats: every cell and step runs once, the work
    spreads over two sessions, each sequence run's steps in one session (step 2 transforms what step 1 made there).
    Losing a step 2's line, a re-run (parallel 2 again) runs that step alone, in the session its step 1 names."""
    plan = ExperimentSpec.model_validate({
        "backend": "hlsl", "sizes": SIZES, "transformations": [TILING, UNROLL], "sequences": [[TILING, UNROLL]],
        "repeats": 2, "max_attempts": 2, "parallel": 2,
        "model": {"label": MODEL, "backend": "replay",
                  "recording": str(write_recording(tmp_path / "recorded.jsonl", REPLIES))}})
    out = tmp_path / "run"
    cells = run(settings, plan, out)

    lines = read_results(out)
    assert len(lines) == len({c.coordinates for c in lines}) == 8 and all(c.finished for c in lines)
    assert {c.coordinates for c in cells} == {c.coordinates for c in lines} and len(cells) == 8
    assert all(c.succeeded for c in cells)
    assert len({c.session_id for c in cells}) == 2  # both sessions ran work
    plain = {(c.transformation, c.repeat): c for c in cells if c.sequence is None}
    assert set(plain) == {(t, r) for t in (TILING, UNROLL) for r in (1, 2)}
    assert [a.outcome for a in plain[TILING, 2].attempts] in (["wrong_result", "faster"], ["wrong_result", "noise"],
                                                           ["wrong_result", "slower"])
    steps = {(c.repeat, c.step): c for c in cells if c.sequence == 1}
    for repeat in (1, 2):
        first, second = steps[repeat, 1], steps[repeat, 2]
        assert first.session_id == second.session_id
        assert first.parent == 0 and second.parent == first.result_version == first.held_version
        assert second.base_ms == first.base_ms and second.speedup_vs_v0 == pytest.approx(
            round(first.base_ms / second.result_ms, 4))
        assert second.held_speedup_vs_v0 == round(second.retimed_base_ms / second.retimed_ms, 4)  # the pair's
    # every exchange was answered by cell: each session numbered its own cells' attempts
    exchanges = read_exchanges(out / EXCHANGES)
    assert len(exchanges) == len(REPLIES) and {e.note for e in exchanges} == {"replayed by cell"}
    assert {(e.cell.transformation, e.cell.sequence, e.cell.step, e.cell.repeat, e.cell.attempt)
            for e in exchanges} == set(REPLIES)

    paths = report.write(cells, out)
    assert {"markdown", "json", "csv", "attempts", "png", "sequences_csv", "sequences_json"} <= set(paths)
    text = paths["markdown"].read_text()
    assert f"| {MODEL} | {TILING} | 2 | 100% (2/2) | 50% |" in text and f"| {MODEL} | 1 | 2 | {UNROLL} |" in text
    assert json.loads(paths["json"].read_text())["totals"][MODEL]["success_rate"] == 1.0
    assert len(paths["attempts"].read_text().splitlines()) == 1 + 5 + 4

    # lose sequence repeat 2's step 2: the re-run runs it alone, in step 1's session, from step 1's version
    raw = (out / RESULTS).read_text().splitlines()
    lost = next(i for i, line in enumerate(raw) if (json.loads(line)["sequence"], json.loads(line)["repeat"],
                                                     json.loads(line)["step"]) == (1, 2, 2))
    (out / RESULTS).write_text("\n".join(raw[:lost] + raw[lost + 1:]) + "\n")
    asked = len(exchanges)
    again = run(settings, plan, out)
    new = read_exchanges(out / EXCHANGES)[asked:]
    assert [(e.cell.sequence, e.cell.step, e.cell.repeat) for e in new] == [(1, 2, 2)]
    redone = next(c for c in again if (c.sequence, c.step, c.repeat) == (1, 2, 2))
    assert redone.session_id == steps[2, 1].session_id and redone.parent == steps[2, 1].result_version
    assert len(again) == 8 and redone.passed


def test_folder_exchange_numbers_are_claimed_once_by_concurrent_writers(tmp_path: Path) -> None:
    """Two exchanges on one folder, four threads each, 25 requests per thread: every request gets its own number,
    and request-<n>.json holds the request of the writer that was told n."""
    from peak_mcp.research.exchange import FolderExchange, Waiting

    told: list[tuple[int, str, int]] = []
    lock = threading.Lock()
    exchanges = {run: FolderExchange(tmp_path, timeout_s=0, run=run) for run in ("a" * 16, "b" * 16)}

    def writer(run: str, thread: int) -> None:
        async def go() -> None:
            for i in range(25):
                tag = thread * 100 + i
                request = Request(system_prompt="s", messages=[], max_tokens=1)
                try:
                    await exchanges[run](request, Cell(model="m", transformation="t", repeat=tag))
                except Waiting as waiting:
                    with lock:
                        told.append((waiting.n, run, tag))

        anyio.run(go)

    threads = [threading.Thread(target=writer, args=(run, t)) for run in exchanges for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(told) == 200 and len({n for n, _, _ in told}) == 200
    assert sorted(n for n, _, _ in told) == list(range(1, 201))
    for n, writer, tag in told:
        written = json.loads((tmp_path / f"request-{n}.json").read_text())
        assert (written["n"], written["run"], written["cell"]["repeat"]) == (n, writer, tag)
    assert not list(tmp_path.glob("*.part"))
