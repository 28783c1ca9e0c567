"""Issue 34 through a real in-process MCP client: stats credit a transformation with its text's own time (never a
later tune's), a declined sampling request ends apply_transformation in a normal answer, and what the tools and
prompts say holds for every problem."""

from __future__ import annotations

import pytest

from tests.conftest import has_device
from tests.test_tuning import TUNED as PARENT
from tests.test_tuning import slow_by_default

pytestmark = pytest.mark.anyio
TEXT = "loop-unrolling-and-launch-bounds"


async def call(client, tool: str, args: dict) -> dict:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return result.structured_content


@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")
async def test_stats_credit_the_text_as_submitted_and_the_tune_apart(make_client) -> None:
    """The child's text adds REPEAT=[8, 1]: as submitted (REPEAT=8) it is slower than its parent; tune then picks
    REPEAT=1. The stats said the text made it faster: they read the tuned time."""
    async with make_client() as (client, _):
        sid = (await call(client, "start_session", {"backend": "hlsl", "sizes": {"M": 64, "N": 64, "K": 64}})
               )["session_id"]
        parent = await call(client, "submit_kernel", {"session_id": sid, "source": PARENT})
        assert parent["status"] == "benchmarked", parent["message"]
        child = await call(client, "submit_kernel", {"session_id": sid, "source": slow_by_default(PARENT),
                                                     "parent": parent["version"], "transformation": TEXT})
        assert child["status"] == "benchmarked", child["message"]
        submitted = child["performance"]["speedup_vs_parent"]
        tuned = await call(client, "tune", {"session_id": sid, "version": child["version"], "max_configs": 6})
        assert tuned["recorded"] and tuned["best"]["params"]["REPEAT"] == 1, tuned
        stats = (await call(client, "get_transformation_stats", {"session_id": sid}))["transformations"]
        row = next(s for s in stats if s["transformation"] == TEXT)
        assert row["median_speedup_vs_parent"] == pytest.approx(submitted, rel=0.01), (row, submitted)
        assert row["successes"] == 0 and row["slowdowns"] + row["within_noise"] == 1, row
        assert row["tuned_later"] == 1 and row["median_tune_speedup"] > 2, row  # REPEAT 8 -> 1: tune's gain
