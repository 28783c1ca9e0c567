"""peak_mcp.research sequence runs: step k transforms what step k-1 made (or, after a failed step, the run's last
passing version), through the real in-process MCP server on lavapipe (HLSL matmul), the model a replay of the
shipped kernels and a broken one; resume after the model stopped answering; the sequence reports' numbers."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest
from pydantic import ValidationError

from peak_mcp.research import report
from peak_mcp.research.exchanges import Cell, Exchange, Request, read_exchanges
from peak_mcp.research.runner import EXCHANGES, RESULTS, read_results
from peak_mcp.research.spec import ExperimentSpec
from tests.conftest import EXAMPLES, has_device, skip_reason
from tests.test_research_experiment import run

HLSL = EXAMPLES / "hlsl"
TILED = (HLSL / "tiled_groupshared.hlsl").read_text()
BLOCKED = (HLSL / "register_blocked.hlsl").read_text()
BROKEN = TILED.replace("float acc", "float acc = missing_symbol +", 1)
SIZES = {"M": 40, "N": 24, "K": 20}
TILING, UNROLL = "hlsl-groupshared-tiling", "loop-unrolling-and-launch-bounds"
SEQUENCES = [[TILING, UNROLL], [UNROLL, TILING]]
MODEL = "recorded"


def fenced(source: str) -> str:
    return f"Here is the kernel.\n\n```hlsl\n{source}```\n"


# (sequence, step, repeat, attempt) -> reply; sequence None: a plain cell of `transformations`
REPLIES: dict[tuple[int | None, int | None, int, int], str] = {
    (None, None, 1, 1): fenced(TILED), (None, None, 2, 1): fenced(BLOCKED),
    (1, 1, 1, 1): fenced(TILED), (1, 2, 1, 1): fenced(BLOCKED),
    (1, 1, 2, 1): fenced(BLOCKED), (1, 2, 2, 1): fenced(TILED),
    (2, 1, 1, 1): fenced(BROKEN), (2, 1, 1, 2): fenced(BROKEN), (2, 2, 1, 1): fenced(TILED),  # step 1 fails
    (2, 1, 2, 1): fenced(BLOCKED), (2, 2, 2, 1): fenced(TILED)}


def write_recording(path: Path, replies: dict) -> Path:
    """An exchanges.jsonl as a run writes it, keyed by cell (the request text is not known before the run):
    replies by (transformation, sequence, step, repeat, attempt)."""
    with path.open("w") as out:
        for (transformation, sequence, step, repeat, attempt), text in replies.items():
            request = Request(messages=[{"role": "user", "text": f"{sequence} {step} {repeat} {attempt}"}],
                              max_tokens=1)
            cell = Cell(model=MODEL, transformation=transformation, repeat=repeat, attempt=attempt,
                        sequence=sequence, step=step)
            out.write(Exchange(key=request.key, cell=cell, request=request, reply=text, seconds=0).model_dump_json()
                      + "\n")
    return path


def recording(path: Path, replies: dict) -> Path:
    """replies by (sequence, step, repeat, attempt): a plain cell's transformation is TILING."""
    return write_recording(path, {(TILING if sequence is None else SEQUENCES[sequence - 1][step - 1], sequence,
                                   step, repeat, attempt): text
                                  for (sequence, step, repeat, attempt), text in replies.items()})


def recorded_ms(settings, session: str, version: int) -> float:
    """The version's median time as the server's store holds it (a fresh service on the run's data dir)."""
    from peak_mcp.api.app import build

    _, service = build(settings)
    try:
        return service.get_version(session, version).report.performance["median_ms"]
    finally:
        service.close()


def test_spec_takes_sequences_beside_or_instead_of_transformations() -> None:
    model = {"label": "m", "backend": "replay", "recording": "r.jsonl"}
    old = ExperimentSpec.model_validate({"transformations": [TILING], "model": model})
    assert old.transformations == [TILING] and old.sequences == []
    only = ExperimentSpec.model_validate({"sequences": [[TILING, UNROLL]], "model": model})
    assert only.transformations == [] and only.sequences == [[TILING, UNROLL]]
    with pytest.raises(ValidationError, match="transformations or sequences"):
        ExperimentSpec.model_validate({"model": model})
    with pytest.raises(ValidationError, match="at least one transformation"):
        ExperimentSpec.model_validate({"sequences": [[TILING], []], "model": model})
    with pytest.raises(ValidationError):
        ExperimentSpec.model_validate({"sequences": [[TILING, 3]], "model": model})
    with pytest.raises(ValidationError):
        ExperimentSpec.model_validate({"sequences": [TILING], "model": model})  # a list of ids, not of lists
    example = ExperimentSpec.read(EXAMPLES.parent / "experiments" / "sequences.json")  # the README's
    assert example.sequences and example.model.recording.exists()


@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
def test_sequences_chain_versions_resume_after_the_model_stopped_and_report(settings, tmp_path: Path) -> None:
    """Two plain cells and two 2-step sequences x 2 repeats. First run: the model stops answering at sequence 1's
    repeat 2 step 2 and everything after it, so those steps are unfinished. The re-run (the recording now whole)
    skips every finished cell and step, resumes sequence 1 repeat 2 at step 2 from the version its step 1 made,
    and ends with every step once. Sequence 2 repeat 1's step 1 never compiles: step 2 transforms v0."""
    recorded = tmp_path / "recorded.jsonl"
    stop_at = list(REPLIES).index((1, 2, 2, 1))
    recording(recorded, dict(list(REPLIES.items())[:stop_at]))
    plan = ExperimentSpec.model_validate({
        "backend": "hlsl", "sizes": SIZES, "transformations": [TILING], "sequences": SEQUENCES, "repeats": 2,
        "max_attempts": 2, "model": {"label": MODEL, "backend": "replay", "recording": str(recorded)}})
    out = tmp_path / "run"

    first = run(settings, plan, out)
    assert [(c.sequence, c.step, c.repeat) for c in first] == [
        (None, None, 1), (None, None, 2), (1, 1, 1), (1, 2, 1), (1, 1, 2)]
    unfinished = [c for c in read_results(out) if not c.finished]
    # each sequence run stops at its first unanswered step: (1, 2, 2), (2, 1, 1), (2, 1, 2)
    assert [(c.sequence, c.step, c.repeat) for c in unfinished] == [(1, 2, 2), (2, 1, 1), (2, 1, 2)]
    assert all("NotRecorded" in (c.error or "") for c in unfinished)
    asked_before = len(read_exchanges(out / EXCHANGES))

    recording(recorded, REPLIES)  # the model answers again
    cells = run(settings, plan, out)
    new = [(e.cell.sequence, e.cell.step, e.cell.repeat, e.cell.attempt)
           for e in read_exchanges(out / EXCHANGES)[asked_before:]]
    assert new == [(1, 2, 2, 1), (2, 1, 1, 1), (2, 1, 1, 2), (2, 2, 1, 1), (2, 1, 2, 1), (2, 2, 2, 1)]
    assert len({c.coordinates for c in cells}) == len(cells) == 10  # none twice
    steps = {(c.sequence, c.repeat, c.step): c for c in cells if c.sequence is not None}
    assert len(steps) == 8 and len([c for c in cells if c.sequence is None]) == 2
    session = cells[0].session_id
    assert {c.session_id for c in cells} == {session}  # the re-run went on in the first run's session
    base_ms = steps[1, 1, 1].base_ms
    assert base_ms == pytest.approx(recorded_ms(settings, session, 0), rel=1e-3)  # the tools give 4 digits

    for (sequence, repeat, step), c in steps.items():
        assert c.transformation == SEQUENCES[sequence - 1][step - 1] and c.base_ms == base_ms
        if step == 1:
            assert c.parent == 0 and c.parent_ms == base_ms
        else:  # what step 1 left: its result where it passed, else v0
            assert (c.parent, c.parent_ms) == (steps[sequence, repeat, 1].held_version,
                                               steps[sequence, repeat, 1].held_ms)
        if c.passed:
            ms = recorded_ms(settings, session, c.result_version)
            assert c.result_ms == pytest.approx(ms, rel=1e-3) and c.held_version == c.result_version
            assert c.speedup_vs_v0 == round(base_ms / c.result_ms, 4)
            # retimed (the default): the result and v0 timed again back to back, the held speedup that pair's
            assert c.retimed_ms and c.retimed_base_ms and c.retimed_base_ms != base_ms
            assert c.held_speedup_vs_v0 == round(c.retimed_base_ms / c.retimed_ms, 4)
            assert c.speedup_vs_v0 == pytest.approx(recorded_ms(settings, session, 0) / ms, rel=2e-3)
            assert c.speedup_vs_parent == c.attempts[-1].speedup_vs_base and c.speedup_vs_parent > 0
    failed = steps[2, 1, 1]
    assert not failed.succeeded and failed.finished
    assert [a.outcome for a in failed.attempts] == ["compile_error", "compile_error"]
    assert (failed.held_version, failed.held_speedup_vs_v0, failed.speedup_vs_v0) == (0, 1.0, None)
    assert steps[2, 1, 2].parent == 0 and steps[2, 1, 2].passed  # one failure does not end the sequence
    assert all(c.passed for k, c in steps.items() if k != (2, 1, 1))
    assert steps[1, 2, 2].parent == steps[1, 2, 1].result_version  # resumed from the version step 1 made

    paths = report.write(cells, out)
    table = {(int(r["sequence"]), int(r["step"])): r for r in csv.DictReader(paths["sequences_csv"].open())}
    assert set(table) == {(1, 1), (1, 2), (2, 1), (2, 2)}
    for (sequence, step), row in table.items():
        held = [steps[sequence, r, step].held_speedup_vs_v0 for r in (1, 2)]
        assert row["transformation"] == SEQUENCES[sequence - 1][step - 1] and row["runs"] == "2"
        assert float(row["median_speedup_vs_v0"]) == pytest.approx(statistics.median(held), abs=1e-4)
        assert (float(row["min_speedup_vs_v0"]), float(row["max_speedup_vs_v0"])) == (min(held), max(held))
    assert (table[2, 1]["succeeded"], table[2, 1]["success_rate"]) == ("1", "0.5")
    assert table[1, 2]["succeeded"] == "2"
    as_json = json.loads(paths["sequences_json"].read_text())["steps"]
    assert [(s["sequence"], s["step"], s["median_speedup_vs_v0"]) for s in as_json] == [
        (k[0], k[1], float(table[k]["median_speedup_vs_v0"])) for k in sorted(table)]
    points = json.loads(paths["sequences_json"].read_text())["runs"]
    assert [(d["sequence"], d["repeat"], d["step"], d["parent"], d["held_speedup_vs_v0"]) for d in points] == [
        (k[0], k[1], k[2], steps[k].parent, steps[k].held_speedup_vs_v0) for k in sorted(steps)]
    text = paths["markdown"].read_text()
    assert "sequences.png" in text and f"| {MODEL} | 2 | 1 | {UNROLL} | 50% (1/2) |" in text
    assert f"| {MODEL} | hlsl-groupshared-tiling | 2 | 100% (2/2) |" in text  # the plain cells' table too
    assert paths["sequences_png"].read_bytes()[:4] == b"\x89PNG"
    assert len(paths["attempts"].read_text().splitlines()) == 1 + 2 + 9

    # A crash during the last step (sequence 2 repeat 2 step 2): its line never written. The re-run runs that step
    # alone, again from the version step 1 made.
    lines = (out / RESULTS).read_text().splitlines()
    assert json.loads(lines[-1])["sequence"] == 2 and json.loads(lines[-1])["step"] == 2
    (out / RESULTS).write_text("\n".join(lines[:-1]) + "\n")
    asked_before = len(read_exchanges(out / EXCHANGES))
    again = run(settings, plan, out)
    assert [(e.cell.sequence, e.cell.step, e.cell.repeat) for e in read_exchanges(out / EXCHANGES)[asked_before:]] \
        == [(2, 2, 2)]
    assert len(again) == 10 and len({c.coordinates for c in again}) == 10
    redone = next(c for c in again if (c.sequence, c.step, c.repeat) == (2, 2, 2))
    assert redone.parent == steps[2, 2, 1].result_version and redone.passed

    # nothing left: one more run asks the model nothing and writes no line
    lines = (out / RESULTS).read_text()
    assert len(run(settings, plan, out)) == 10 and (out / RESULTS).read_text() == lines


def test_a_failed_step_holds_the_retimed_speedup_of_the_step_before() -> None:
    """A failed step holds its parent: the speedup the run held (from a retimed pair) stays, and is not replaced
    by the parent's start-of-session ratio."""
    from peak_mcp.research.runner import CellResult, _as_step

    failed = CellResult(model=MODEL, transformation=UNROLL, repeat=1, session_id="s", base_version=0,
                        finished=True, wall_s=1.0)
    step = _as_step(failed, parent=3, parent_ms=50.0, base_ms=200.0, held_speedup=3.2)
    assert (step.held_version, step.held_ms, step.held_speedup_vs_v0, step.speedup_vs_v0) == (3, 50.0, 3.2, None)
    passed = failed.model_copy(update={"succeeded": True, "result_version": 4, "result_ms": 40.0})
    assert _as_step(passed, parent=3, parent_ms=50.0, base_ms=200.0, held_speedup=3.2).held_speedup_vs_v0 == 5.0
