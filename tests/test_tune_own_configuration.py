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
