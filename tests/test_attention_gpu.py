"""The Hopper attention steps through the server on a Hopper GPU (bf16): step 6 (warp-specialized) validates with a
partial last key tile, and a copy of it that walks only whole key tiles, right at a session size that is a multiple
of the tile, is told not_general: generality's pitched size keeps D = 128 (the fast path) with S = 257 (two whole
tiles and one key more). Before that size, D = 128 was met only at S = 11 (one tile), and such a kernel passed.
Skipped without a CUDA GPU of compute capability 9.x."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT, hopper_marks

pytestmark = hopper_marks()

STEP6 = ROOT / "examples" / "attention" / "cuda" / "6_warp_specialized.cu"
WHOLE_TILES = "const int tiles = (last_key + BN - 1) / BN;"


def _source(text: str) -> str:
    return text.replace("typedef float T;", "typedef __nv_bfloat16 T;", 1)


async def _session(client, problem: str, sizes: dict[str, int]) -> str:
    started = await client.call_tool("start_session", {"problem": problem, "backend": "cuda", "dtype": "bf16",
                                                       "sizes": sizes})
    assert not started.is_error, started.content[0].text
    return started.structured_content["session_id"]


@pytest.mark.parametrize("problem", ["attention", "attention_causal"])
async def test_step_6_validates_with_a_partial_last_tile(make_client, problem: str) -> None:
    async with make_client() as (client, _):
        sid = await _session(client, problem, {"B": 1, "H": 3, "S": 300, "D": 128})
        result = await client.call_tool("submit_kernel", {"session_id": sid, "source": _source(STEP6.read_text())})
        assert not result.is_error, result.content[0].text
        report = result.structured_content
        assert report["status"] == "benchmarked", report.get("message")


async def test_a_kernel_right_only_at_whole_key_tiles_is_not_general(make_client) -> None:
    text = STEP6.read_text()
    assert WHOLE_TILES in text
    cheat = text.replace(WHOLE_TILES, "const int tiles = max(1, last_key / BN);  // whole tiles only")
    async with make_client() as (client, _):
        sid = await _session(client, "attention", {"B": 1, "H": 2, "S": 512, "D": 128})
        result = await client.call_tool("submit_kernel", {"session_id": sid, "source": _source(cheat)})
        assert not result.is_error, result.content[0].text
        report = result.structured_content
        assert report["status"] == "not_general", report.get("message")
        failed = [f["sizes"] for f in report["generality"]["failures"]]
        assert any(isinstance(s, dict) and s["D"] == 128 and s["S"] % 128 and s["S"] > 128 for s in failed), failed
