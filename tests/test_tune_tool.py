"""tune through a real in-process MCP client on the Vulkan device (lavapipe here): search, records, history,
progress, the tuned configuration as the version's performance, and a child's tuning seeded by its parent's."""

from __future__ import annotations

import pytest

from tests.conftest import has_device
from tests.test_tuning import TUNED as SEARCHED
from tests.test_tuning import slow_by_default

TUNED = slow_by_default(SEARCHED)  # so that tuning adopts the search's fastest (tuning.beats)

pytestmark = [pytest.mark.vulkan, pytest.mark.anyio,
              pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")]
SIZES = {"M": 64, "N": 64, "K": 64}


async def test_tune_records_every_configuration_and_times_the_best_in_full(make_client) -> None:
    events: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        events.append(message or "")

    async with make_client() as (client, service):
        # bounded sizes: TILE=4 launches cdiv(N, 4) groups, past lavapipe's 65,535 at the largest sizes generality's
        # launch check evaluates otherwise, and the tuned configuration would then fail its full checks
        sid = (await client.call_tool("start_session", {"backend": "hlsl", "sizes": SIZES,
                                                        "constraints": ["M <= 65536", "N <= 65536"]})
               ).structured_content["session_id"]
        submitted = (await client.call_tool("submit_kernel", {"session_id": sid, "source": TUNED})).structured_content
        assert submitted["status"] == "benchmarked", submitted["message"]
        v = submitted["version"]
        result = await client.call_tool("tune", {"session_id": sid, "version": v, "max_configs": 9},
                                        progress_callback=on_progress)
        assert not result.is_error, result.content[0].text
        report = result.structured_content
        assert report["tried"] <= 9 and report["best"] is not None
        assert any(r["status"] == "ok" for r in report["results"])
        # one device measured everything: named once, not on every configuration (the store keeps each one's)
        assert report["devices"] == [0] and not any("device" in r for r in report["results"] + report["pruned"])
        assert any(e.startswith("tuning: ") and "configurations" in e for e in events)
        stored = service.store.version(sid, v)
        assert stored.tuning and stored.tuning.tried == report["tried"]  # every configuration is kept
        assert {r.device for r in stored.tuning.results} == {0}
        assert stored.timing and stored.timing.params == report["best"]["params"]  # the version's time: the tuned one
        assert "tuned over" in stored.message
        detail = (await client.call_tool("get_version", {"session_id": sid, "version": v})).structured_content
        assert detail["report"]["tuning"]["best"]["params"] == report["best"]["params"]
        assert detail["report"]["performance"]["params"] == report["best"]["params"]  # which configuration was timed
        rows = (await client.call_tool("history", {"session_id": sid})).structured_content["rows"]
        assert rows[v]["params"] == report["best"]["params"]

        # A child: its tuning starts from the parent's fastest configurations.
        child = (await client.call_tool("submit_kernel", {"session_id": sid, "source": TUNED + "\n// child\n",
                                                          "parent": v})).structured_content
        again = (await client.call_tool("tune", {"session_id": sid, "version": child["version"],
                                                 "max_configs": 1})).structured_content
        assert again["tried"] == 1
        first = (again["results"] or again["pruned"])[0]["params"]
        assert stored.tuning.best and (first == stored.tuning.best.params or first in [
            r.params for r in stored.tuning.results if r.status == "ok"])


async def test_tune_refuses_a_kernel_without_parameters(make_client) -> None:
    async with make_client() as (client, _):
        sid = (await client.call_tool("start_session", {"backend": "hlsl", "sizes": SIZES})
               ).structured_content["session_id"]
        result = await client.call_tool("tune", {"session_id": sid, "version": 0})
        assert result.is_error and "no tuning parameters" in result.content[0].text
        assert "peak: params" in result.content[0].text
