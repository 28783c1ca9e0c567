"""The profile tool through a real in-process MCP client: CUDA and HIP compile-only (NVRTC, the offline AMD compiler
here) and HLSL on lavapipe."""

from __future__ import annotations

import pytest

from peak_mcp.backends import amd_offline
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
        answer = await client.call_tool("profile", {"session_id": sid})
        report = answer.structured_content
        assert report["instruction_mix"]["total"] > 0
        assert report["occupancy"]["available"] is False and "Vulkan" in report["occupancy"]["why"]
        # counted in the SPIR-V, not executed: said where the numbers are, in the record and in the text
        counts = report["instruction_mix"]["counts"]
        assert counts.startswith("static: each instruction in the SPIR-V module counted once") and \
            "not executed counts" in counts
        assert "not executed counts" in answer.content[0].text


@pytest.mark.skipif(amd_offline.find_toolchain() is None, reason=f"no AMD compiler: {amd_offline.INSTALL_HINT}")
async def test_hip_profile_on_amd_gives_the_compiles_resources_and_says_what_it_lacks(make_client) -> None:
    """profile on a HIP session said "not implemented" while submit_kernel reported the kernel's resources."""
    if has_device("hip"):
        pytest.skip("a HIP GPU is present: this is the compile-only gfx target")
    async with make_client() as (client, _):
        sid, version = await _submit(client, "hip", "mfma_f32.hip")
        report = (await client.call_tool("profile", {"session_id": sid, "version": version})).structured_content
        assert report["backend"] == "hip" and report["arch"] == "gfx90a"
        resources = report["resources"]
        assert resources["available"] and resources["registers"] > 0 and resources["static_shared_bytes"] == 17408
        assert "MFMA instructions in the kernel" in resources["note"] and "AGPRs" in resources["note"]
        assert report["occupancy"]["waves_per_simd"] > 0 and "the compiler's figure" in report["occupancy"]["note"]
        mix, counters = report["instruction_mix"], report["counters"]
        assert mix["available"] is False and "not implemented" in mix["why"]
        assert counters["available"] is False and "rocprof is not wired in" in counters["why"]
        assert "no AMD GPU" in counters["why"]


async def test_hip_profile_on_nvidia_reads_the_cubin_as_cuda_does(make_client, settings) -> None:
    settings.hip_arch = "sm_90a"
    if has_device("hip"):
        pytest.skip("a HIP GPU is present")
    async with make_client() as (client, _):
        sid, version = await _submit(client, "hip", "smem_tiled.hip")
        report = (await client.call_tool("profile", {"session_id": sid, "version": version})).structured_content
        assert report["backend"] == "hip" and report["resources"]["registers"] > 0
        assert 0 < report["occupancy"]["occupancy"] <= 1
        mix = report["instruction_mix"]
        assert not mix.get("available", True) or mix["counts"].startswith("static: each instruction in the SASS")


async def test_profile_of_an_unknown_version_is_a_clear_error(make_client) -> None:
    async with make_client() as (client, _):
        sid, _ = await _submit(client, "cuda", "double_buffered.cu")
        result = await client.call_tool("profile", {"session_id": sid, "version": 99})
        assert result.is_error and "99" in result.content[0].text
