"""tune whose fastest configuration is the one the version was timed with adopts nothing: the version's recorded time
stays (an agent saw a LayerNorm's 0.5466 ms become 0.7578 ms after tune re-timed the same configuration)."""

from __future__ import annotations

import pytest

from tests.test_agent_findings import SIZES, VULKAN, WAVE, call

pytestmark = pytest.mark.anyio


@VULKAN
async def test_tune_that_finds_the_version_s_own_configuration_keeps_its_time(make_client) -> None:
    source = WAVE.replace("// peak: params NT=[64, 32]", "// peak: params NT=[64]")  # one configuration: its own
    async with make_client() as (client, service):
        sid = (await call(client, "start_session", {"problem": "softmax", "backend": "hlsl", "dtype": "f32",
                                                    "sizes": SIZES}))["session_id"]
        v = (await call(client, "submit_kernel", {"session_id": sid, "source": source}))["version"]
        before = service.store.version(sid, v).timing
        assert before is not None
        report = await call(client, "tune", {"session_id": sid, "version": v, "max_configs": 1})
        after = service.store.version(sid, v).timing
        # the same measurement (not another one of the same configuration), now marked tuned
        assert after is not None and after.median_ms == before.median_ms and after.params_from == "tuned"
        assert report["recorded"]["median_ms"] == pytest.approx(before.median_ms, rel=1e-3)
        assert "own configuration: nothing to adopt" in report["stopped"], report["stopped"]


@VULKAN
async def test_tune_says_when_nothing_passed_and_refuses_a_version_that_never_compiled(make_client) -> None:
    """An agent's tune of a failed version said "16 failed their checks" when all 18 had (16: the answer's list),
    and nothing said that none passed; a version that never compiled was told it "declares no tuning parameters"."""
    wrong = WAVE.replace("y[base + c3] = exp(x[base + c3] - m) * inv;", "y[base + c3] = x[base + c3] + m * 0.0;")
    assert wrong != WAVE
    async with make_client() as (client, _):
        sid = (await call(client, "start_session", {"problem": "softmax", "backend": "hlsl", "dtype": "f32",
                                                    "sizes": SIZES}))["session_id"]
        v = (await call(client, "submit_kernel", {"session_id": sid, "source": wrong}))["version"]
        answer = await client.call_tool("tune", {"session_id": sid, "version": v, "max_configs": 2})
        assert not answer.is_error, answer.content[0].text
        text = answer.content[0].text
        assert answer.structured_content["failed_count"] == 2 and not answer.structured_content.get("passed_count")
        assert "2 failed their checks" in text and "none of the 2 configurations tried passed" in text, text
        broken = (await call(client, "submit_kernel", {"session_id": sid, "source": "// peak: entry=main "
                                                       "groups=(1, 1, 1)\nnot hlsl"}))["version"]
        refused = await client.call_tool("tune", {"session_id": sid, "version": broken})
        assert refused.is_error and "did not compile" in refused.content[0].text, refused.content[0].text
