"""start_session says, once, what a kernel must know beyond the ABI: what "correct" means (the tolerance), the launch
line's grammar, 64-bit indexing where a buffer passes 2^31 bytes, the compiler's headers, and that a session without a
device only compiles (each one an agent had to guess at, over MCP alone)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from peak_mcp.api.responses import whole_answer

pytestmark = pytest.mark.anyio
DATA = Path(__file__).resolve().parent / "data" / "kernelbench"


async def start(client: Any, args: dict[str, Any]) -> tuple[dict[str, Any], str]:
    result = await client.call_tool("start_session", args)
    assert not result.is_error, result.content[0].text
    return whole_answer("start_session", result), result.content[0].text


async def test_a_compile_only_session_says_its_rules_and_that_nothing_runs(make_client, settings,
                                                                          tmp_path: Path) -> None:
    folder = tmp_path / "problems"
    folder.mkdir()
    shutil.copy(DATA / "np_relu.py", folder / "relu.py")  # a KernelBench-shaped file, no torch needed
    settings.problem_dirs = [folder]
    async with make_client() as (client, _):
        # 4096 x 393216 f32 (KernelBench's own relu sizes): 6.4 GB, past what an int byte offset holds
        info, text = await start(client, {"problem": "relu", "backend": "cuda", "dtype": "f32",
                                          "sizes": {"BATCH_SIZE": 4096, "DIM": 393216}})
        rules = info["rules"]
        assert "Rules of this session:" in text and rules in text
        assert "Correct means: every float output within" in rules and "relative L2" in rules
        assert "SM_COUNT" in rules and "cdiv(a, b)" in rules and "BATCH_SIZE, DIM" in rules
        assert "x holds 1,610,612,736 elements (6.44 GB)" in rules and "64-bit index arithmetic" in rules
        assert "NVRTC" in rules and "cub/block" in rules and "CUDART_INF_F" in rules
        assert "No device here" in rules and "not run, validated or timed" in rules
        assert "compiled only: this machine has no device" in info["brief"]
        # small sizes: no index-width line
        small, _ = await start(client, {"problem": "relu", "backend": "cuda", "dtype": "f32",
                                        "sizes": {"BATCH_SIZE": 8, "DIM": 64}})
        assert "Index width" not in small["rules"]


async def test_an_hlsl_session_names_groups_and_no_cuda_compiler(make_client) -> None:
    from tests.conftest import has_device

    if not has_device("hlsl"):
        pytest.skip("no Vulkan device")
    async with make_client() as (client, _):
        info, _ = await start(client, {"problem": "softmax", "backend": "hlsl", "dtype": "f32",
                                       "sizes": {"ROWS": 8, "COLS": 64}})
        rules = info["rules"]
        assert "groups=(x, y, z)" in rules and "[numthreads] is in the source" in rules
        assert "NVRTC" not in rules and "No device here" not in rules
