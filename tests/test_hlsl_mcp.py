"""The HLSL loop end to end through an in-process MCP client: real glslang, real Vulkan dispatch (lavapipe in CI)."""

from __future__ import annotations

import pytest

from peak_mcp.api.responses import whole_answer
from tests.conftest import EXAMPLES, ROOT, has_device, probe, skip_reason

pytestmark = [pytest.mark.vulkan, pytest.mark.anyio]
if not has_device("hlsl"):
    pytestmark.append(pytest.mark.skip(reason=f"no Vulkan device: {skip_reason('hlsl')}"))

SIZES = {"M": 70, "N": 45, "K": 33}  # not tile multiples
HANG = (ROOT / "examples" / "faults" / "hang.hlsl").read_text()


async def _submit(client, session_id: str, source: str) -> dict:
    result = await client.call_tool("submit_kernel", {"session_id": session_id, "source": source})
    assert not result.is_error, result.content[0].text
    return whole_answer("submit_kernel", result)  # its compile log: in the text


async def test_examples_run_the_loop(make_client) -> None:
    async with make_client() as (client, _):
        doctor = (await client.call_tool("doctor", {})).structured_content
        hlsl = next(b for b in doctor["backends"] if b["backend"] == "hlsl")
        assert hlsl["devices"], hlsl
        started = await client.call_tool("start_session", {"backend": "hlsl", "sizes": SIZES})
        assert not started.is_error, started.content[0].text
        session = started.structured_content
        assert session["version_0"]["status"] == "benchmarked", session["version_0"]["message"]
        # A GPU's Vulkan has no vendor library (peak is the yardstick); a CPU device's is the CPU's BLAS.
        assert session["baseline"]["available"] == (session["device"].get("device_type") == "cpu")
        for path in sorted((EXAMPLES / "hlsl").glob("*.hlsl")):
            report = await _submit(client, session["session_id"], path.read_text())
            assert report["status"] == "benchmarked", (path.name, report["message"])
            assert report["performance"]["median_ms"] > 0 and report["compile"]["resources"]
        rows = (await client.call_tool("history", {"session_id": session["session_id"]})).structured_content["rows"]
        assert len(rows) == 4 and all(r["tflops"] > 0 for r in rows)


async def test_compile_error_comes_back_with_the_kernel_line(make_client) -> None:
    source = (EXAMPLES / "hlsl" / "naive.hlsl").read_text().replace("acc += ", "acc += undefined_name + ")
    async with make_client() as (client, _):
        sid = (await client.call_tool("start_session", {"backend": "hlsl", "sizes": SIZES})
               ).structured_content["session_id"]
        report = await _submit(client, sid, source)
        assert report["status"] == "compile_error"
        line = next(n for n, text in enumerate(source.splitlines(), 1) if "undefined_name" in text)
        assert "undefined_name" in report["compile"]["log"] and f":{line}:" in report["compile"]["log"]


async def test_a_shader_that_never_ends_does_not_hang_the_server(make_client, settings) -> None:
    settings.vk_fence_timeout_s = 3
    settings.inactivity_timeout_s = 20
    async with make_client() as (client, service):
        sid = (await client.call_tool("start_session", {"backend": "hlsl", "sizes": SIZES})
               ).structured_content["session_id"]
        hung = await _submit(client, sid, HANG)
        assert hung["status"] == "error" and hung["failure"] == "timeout", hung
        assert "did not finish" in hung["message"] or "no progress" in hung["message"], hung["message"]
        after = await _submit(client, sid, (EXAMPLES / "hlsl" / "tiled_groupshared.hlsl").read_text())
        assert after["status"] == "benchmarked", after["message"]
        assert service.pool.restarts >= 1
        head = (await client.call_tool("get_version", {"session_id": sid})).structured_content["report"]
        assert head["version"] == 2


async def test_a_wrong_shader_fails_validation_and_is_told_the_abi(make_client) -> None:
    source = (EXAMPLES / "hlsl" / "naive.hlsl").read_text().replace("C[row * p.N + col] = acc;",
                                                                    "C[row * p.N + col] = acc + 0.5;")
    async with make_client() as (client, _):
        sid = (await client.call_tool("start_session", {"backend": "hlsl", "sizes": SIZES})
               ).structured_content["session_id"]
        report = await _submit(client, sid, source)
        assert report["status"] == "failed" and report["failure"] == "wrong_result", report["message"]
        assert "This session's ABI (f32)" in report["message"] and "binding(2)" in report["message"]
        assert report["head"] == 0


async def test_a_cpu_vulkan_device_has_a_yardstick(make_client) -> None:
    """lavapipe has no vendor library and no peak: the same CPU's BLAS (numpy) is timed instead, and history
    reports the kernels against it."""
    devices = probe().get("hlsl", {}).get("devices") or [{}]
    if devices[0].get("properties", {}).get("device_type") != "cpu":  # before the client opens: the reason shows
        pytest.skip(f"the Vulkan device is not a CPU one: {devices[0].get('name')}")
    async with make_client() as (client, service):
        device, _ = service.devices.device_for("hlsl")
        assert device.is_cpu
        info = (await client.call_tool("start_session", {"backend": "hlsl", "sizes": {"M": 64, "N": 64, "K": 64}})
                ).structured_content
        assert info["baseline"]["available"] and "numpy" in info["baseline"]["library"]
        assert info["baseline"]["median_ms"] > 0
        rows = (await client.call_tool("history", {"session_id": info["session_id"]})).structured_content["rows"]
        assert rows[0]["pct_of_vendor"] is not None and rows[0]["pct_of_vendor"] > 0
