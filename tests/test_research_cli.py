"""`peak-mcp experiment SPEC.json` end to end, the server a child over stdio (`python -m peak_mcp serve`), the model a
replay: one run whose reply does not compile, classed compile_error in the printed and written reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from peak_mcp.research.exchanges import Cell, Exchange, Request
from tests.conftest import EXAMPLES, has_device, skip_reason
from tests.test_cli import cli

BROKEN = (EXAMPLES / "hlsl" / "tiled_groupshared.hlsl").read_text().replace("float acc", "float acc = missing +", 1)


@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
def test_experiment_command_over_stdio(tmp_path: Path, capsys) -> None:
    request = Request(messages=[{"role": "user", "text": "-"}], max_tokens=1)
    cell = Cell(model="m", transformation="hlsl-groupshared-tiling", repeat=1, attempt=1)
    (tmp_path / "recorded.jsonl").write_text(Exchange(
        key=request.key, cell=cell, request=request, reply=f"```hlsl\n{BROKEN}```\n", seconds=0
    ).model_dump_json() + "\n")
    spec = tmp_path / "plan.json"
    spec.write_text(json.dumps({
        "backend": "hlsl", "sizes": {"M": 16, "N": 8, "K": 8}, "transformations": ["hlsl-groupshared-tiling"],
        "repeats": 1, "max_attempts": 1, "server": "stdio",
        "model": {"label": "m", "backend": "replay", "recording": "recorded.jsonl"}}))
    # test_cli's cli(): main() in this process, its logging set-up put back after (it points at the captured
    # stderr, which closes with this test: every later test that logs would write to a closed file)
    code, printed, _ = cli("experiment", str(spec), "--data-dir", str(tmp_path / "data"), capsys=capsys)
    assert code == 0
    assert "| m | hlsl-groupshared-tiling | 1 | 0% (0/1) | 0% | 0% (0/1) | 1 | compile_error 1 |" in printed
    out = tmp_path / "plan"  # the default: the spec's path without .json
    row = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    assert row["finished"] and not row["succeeded"] and row["attempts"][0]["status"] == "compile_error"
    assert {p.name for p in out.iterdir()} >= {"report.md", "report.csv", "report.json", "attempts.csv",
                                              "report.png", "exchanges.jsonl", "spec.json"}
    assert (tmp_path / "data").is_dir()  # the child served from the data dir given
