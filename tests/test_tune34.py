"""Issue 34, points 8 and 10, through a real MCP client on lavapipe: tune said "2 failed their checks" and named
neither the configurations nor the cause, in its answer, history or get_version; and a second tune of a version
whose space had been searched in full (suggest_next advised tuning it) ran the whole search again."""

from __future__ import annotations

import pytest

from tests.test_agent_findings import SIZES, VULKAN, WAVE, call

pytestmark = pytest.mark.anyio

# NT=64 right, NT=32 wrong by 1% (a wrong result), NT=128 does not compile
SOURCE = WAVE.replace("// peak: params NT=[64, 32]", "// peak: params NT=[64, 32, 128]\n#if NT == 128\n"
                      "#error NT=128 is not supported by this kernel\n#endif").replace(
    "y[base + c3] = exp(x[base + c3] - m) * inv;",
    "y[base + c3] = exp(x[base + c3] - m) * inv * (NT == 32 ? 1.01 : 1.0);")


@VULKAN
async def test_failed_configurations_are_named_with_their_cause_and_a_full_search_is_not_run_twice(
        make_client) -> None:
    assert SOURCE.count("NT == 32") == 1 and "#error" in SOURCE
    async with make_client() as (client, service):
        sid = (await call(client, "start_session", {"problem": "softmax", "backend": "hlsl", "dtype": "f32",
                                                    "sizes": SIZES}))["session_id"]
        v = await call(client, "submit_kernel", {"session_id": sid, "source": SOURCE})
        assert v["status"] == "benchmarked", v["message"]
        answer = await client.call_tool("tune", {"session_id": sid, "version": v["version"]})
        assert not answer.is_error, answer.content[0].text
        text, report = answer.content[0].text, answer.structured_content
        assert report["tried"] == 3 and not report.get("reused"), report
        # point 8: which configuration failed, and why, in the answer's text and its record
        wrong = next(line for line in text.splitlines() if line.startswith("failed: NT=32: "))
        assert "wrong result: y differs" in wrong and "relative L2 error" in wrong, wrong
        broken = next(line for line in text.splitlines() if line.startswith("failed: NT=128: "))
        assert "compile error" in broken and "not supported by this kernel" in broken, broken
        assert len(report["failures"]) == 2, report["failures"]
        detail = await client.call_tool("get_version", {"session_id": sid, "version": v["version"]})
        assert "failed: NT=32: wrong result" in detail.content[0].text, detail.content[0].text
        assert "failed: NT=128: compile error" in detail.content[0].text, detail.content[0].text
        assert detail.structured_content["report"]["tuning"]["failures"] == report["failures"]
        searched_at = service.store.version(sid, v["version"]).tuning.at

        # point 10: the space was searched in full; suggest_next does not advise tuning it, tune returns the record
        ranked = (await call(client, "suggest_next", {"session_id": sid, "limit": 25}))["suggestions"]
        at = next(i for i, s in enumerate(ranked) if s["id"] == "tile-size-tuning")
        assert "already searched in full" in ranked[at]["why"], ranked[at]
        assert all("ranked after the untried texts" in s["why"] for s in ranked[at + 1:]), ranked  # after the rest
        again = await client.call_tool("tune", {"session_id": sid, "version": v["version"]})
        assert not again.is_error, again.content[0].text
        reused = again.structured_content
        assert reused["reused"] and "again=true" in reused["reused"], reused
        assert again.content[0].text.startswith("reused: nothing measured"), again.content[0].text
        assert reused["tried"] == 3 and reused["failures"] == report["failures"]  # the record, its failures too
        assert service.store.version(sid, v["version"]).tuning.at == searched_at  # nothing was searched again
        forced = await call(client, "tune", {"session_id": sid, "version": v["version"], "again": True})
        assert not forced.get("reused") and forced["tried"] == 3
        assert service.store.version(sid, v["version"]).tuning.at > searched_at


def test_the_full_timings_gap_is_a_speed_ratio_like_submit_kernels() -> None:
    """An agent read "the full timing is 1.38× the search's estimate" as faster: it was a time ratio, and slower."""
    from types import SimpleNamespace

    from peak_mcp.evaluation.configs import BestConfig, ConfigResult, TuneReport
    from peak_mcp.loop.tuning.tune import _estimate_gap

    estimate = ConfigResult(params={"T": 1}, status="ok", median_ms=1.0, cv=0.01)
    report = TuneReport(version=1, strategy="random", space_size=1, valid_size=1, tried=1, where_pruned=0, pruned=[],
                        results=[estimate],
                        best=BestConfig(params={"T": 1}, median_ms=1.0), stopped="space exhausted")
    slower = SimpleNamespace(median_ms=1.25, p25_ms=1.24, p75_ms=1.26)
    text = _estimate_gap(slower, report)
    assert text is not None and "0.8× the speed the search estimated (slower beyond noise" in text
