"""What the reports say must be true (issue 20), through a real in-process MCP client on the Vulkan device (lavapipe
here), the client's sampling callback playing the LLM: a version wrong at other sizes is no success anywhere it
appears."""

from __future__ import annotations

import base64
import io

import pytest

from tests.conftest import EXAMPLES, has_device, skip_reason
from tests.test_apply import ScriptedLLM, fenced
from tests.test_verdicts import UNGUARDED

pytestmark = [pytest.mark.vulkan, pytest.mark.anyio]
if not has_device("hlsl"):
    pytestmark.append(pytest.mark.skip(reason=f"no Vulkan device: {skip_reason('hlsl')}"))

TILE_MULTIPLES = {"M": 32, "N": 32, "K": 32}  # where UNGUARDED is right; the sampled sizes are not all multiples
TILED = (EXAMPLES / "hlsl" / "tiled_groupshared.hlsl").read_text()


async def _start(client, sizes: dict[str, int] = TILE_MULTIPLES) -> str:
    result = await client.call_tool("start_session", {"backend": "hlsl", "sizes": sizes})
    assert not result.is_error, result.content[0].text
    return result.structured_content["session_id"]


def _png_description(data: str) -> str:
    from PIL import Image

    return Image.open(io.BytesIO(base64.b64decode(data))).text.get("Description", "")


async def test_a_version_wrong_at_other_sizes_is_no_success_anywhere(make_client) -> None:
    """Attempt 1 is a tile kernel without edge guards: right at 32^3, wrong at the sampled sizes. It is recorded as
    not_general, the run goes on to attempt 2 with the generality failure in the brief, and statistics, history
    and the chart all show it as what it is."""
    llm = ScriptedLLM([fenced(UNGUARDED, "hlsl"), fenced(TILED, "hlsl")])
    async with make_client(sampling_callback=llm) as (client, _):
        sid = await _start(client)
        step = (await client.call_tool("apply_transformation", {"session_id": sid,
                                                                "transformation": "shared-memory-tiling"})
                ).structured_content
        first, second = step["attempts"]
        assert first["status"] == "not_general" and first["failure"].startswith("generality_"), first
        assert first["message"].startswith("not general: right at the session") and "not a success" in first["message"]
        assert step["succeeded"] and step["attempt"] == 2 and step["result"] == second["version"], step
        assert second["status"] == "benchmarked"

        # The retry brief fed the generality failure back: sizes, check, and what would make it general.
        retry = llm.prompts[1]
        why = retry.split("## Why it failed\n", 1)[1]
        assert why.startswith("not general: right at the session") and "M=1,N=1,K=1" in why
        assert "require_generality" in why
        assert "version 1, not_general (generality_" in retry

        stats = (await client.call_tool("get_transformation_stats", {})).structured_content["transformations"]
        tiling = next(s for s in stats if s["transformation"] == "shared-memory-tiling")
        assert (tiling["attempts"], tiling["successes"], tiling["success_rate"]) == (2, 1, 0.5), tiling
        assert tiling["first_try_success_rate"] == 0.0
        assert tiling["failure_kinds"] == {first["failure"]: 1}

        history = await client.call_tool("history", {"session_id": sid, "chart": True})
        rows = history.structured_content["rows"]
        assert [r["status"] for r in rows] == ["benchmarked", "not_general", "benchmarked"]
        check = first["failure"].removeprefix("generality_")
        assert f"| 1 | 0 | shared-memory-tiling #1 | not_general: {check} |" in history.content[0].text
        assert "not general (wrong at other sizes): v1" in _png_description(history.content[1].data)

        # With no attempt left, the run ends exhausted, and says how to accept a specialized kernel.
        llm.replies.append(fenced(UNGUARDED, "hlsl"))
        step = (await client.call_tool("apply_transformation", {"session_id": sid, "version": 0, "max_attempts": 1,
                                                                "transformation": "shared-memory-tiling"})
                ).structured_content
        assert step["done"] and not step["succeeded"], step
        assert f"revert(version={step['result']}, require_generality=false)" in step["message"], step["message"]
        accepted = (await client.call_tool("revert", {"session_id": sid, "version": step["result"],
                                                      "require_generality": False})).structured_content
        assert accepted["head"] == step["result"] and accepted["status"] == "not_general"
