"""Hints that pointed an agent the wrong way: suggest_next advised `tune` for a head with no parameters (and on a
machine that cannot time), and list_sessions printed "head vNone" for a session without a head."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from peak_mcp.catalog.suggest import _tune_hint

pytestmark = pytest.mark.anyio


def test_tune_is_advised_only_for_what_it_can_do() -> None:
    tunable = "// peak: entry=k grid=(1, 1, 1) block=(BLOCK, 1, 1)\n// peak: params BLOCK=[128, 256]\n"
    assert _tune_hint(tunable, runs=True) == "tune its parameters (tune)"
    assert "declare tuning parameters" in _tune_hint(tunable.splitlines()[0], runs=True)
    assert _tune_hint(tunable, runs=False) == ""  # no device: tune cannot time anything


async def test_a_session_without_a_head_is_listed_as_such(make_client, settings, tmp_path: Path) -> None:
    folder = tmp_path / "problems"
    folder.mkdir()
    shutil.copy(Path(__file__).resolve().parent / "data" / "kernelbench" / "np_relu.py", folder / "relu.py")
    settings.problem_dirs = [folder]  # no naive kernel: the session starts without a version
    async with make_client() as (client, _):
        await client.call_tool("list_problems", {})
        sid = (await client.call_tool("start_session", {"problem": "relu", "backend": "cuda",
                                                        "sizes": {"BATCH_SIZE": 8, "DIM": 64}})
               ).structured_content["session_id"]
        await client.call_tool("submit_kernel", {"session_id": sid, "source": "not a kernel"})
        listed = await client.call_tool("list_sessions", {})
        line = next(x for x in listed.content[0].text.splitlines() if x.startswith(sid))
        assert "no head" in line and "vNone" not in line, line
