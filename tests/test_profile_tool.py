"""The profile tool through a real in-process MCP client: CUDA compile-only (NVRTC here) and HLSL on lavapipe."""

from __future__ import annotations

import pytest

from tests.conftest import EXAMPLES, has_device

pytestmark = pytest.mark.anyio
SMALL = {"M": 64, "N": 48, "K": 32}


async def _submit(client, backend: str, example: str) -> tuple[str, int]:
    session = await client.call_tool("start_session", {"backend": backend, "sizes": SMALL})
    assert not session.is_error, session.content[0].text
    sid = session.structured_content["session_id"]
    report = await client.call_tool("submit_kernel", {"session_id": sid,
                                                      "source": (EXAMPLES / backend / example).read_text()})
    assert not report.is_error, report.content[0].text
    return sid, report.structured_content["version"]


async def test_cuda_profile_reads_resources_and_occupancy_from_the_compiled_kernel(make_client) -> None:
    async with make_client() as (client, _):
        sid, version = await _submit(client, "cuda", "double_buffered.cu")
        result = await client.call_tool("profile", {"session_id": sid, "version": version})
        assert not result.is_error, result.content[0].text
        report = result.structured_content
        assert report["version"] == version and report["backend"] == "cuda"
        assert report["resources"]["registers"] > 0
        assert 0 < report["occupancy"]["occupancy"] <= 1 and report["occupancy"]["limited_by"]
        # No GPU here: counters say why instead of inventing numbers.
        assert report["counters"]["available"] is False and report["counters"]["why"]
        assert len(result.content[0].text) < 4000  # lean: parsed numbers, not tool dumps


@pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")
async def test_hlsl_profile_counts_spirv_and_says_occupancy_is_undefined(make_client) -> None:
    async with make_client() as (client, _):
        sid, _ = await _submit(client, "hlsl", "tiled_groupshared.hlsl")
        report = (await client.call_tool("profile", {"session_id": sid})).structured_content
        assert report["instruction_mix"]["total"] > 0
        assert report["occupancy"]["available"] is False and "Vulkan" in report["occupancy"]["why"]


async def test_profile_of_an_unknown_version_is_a_clear_error(make_client) -> None:
    async with make_client() as (client, _):
        sid, _ = await _submit(client, "cuda", "double_buffered.cu")
        result = await client.call_tool("profile", {"session_id": sid, "version": 99})
        assert result.is_error and "99" in result.content[0].text
