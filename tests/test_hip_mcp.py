"""HIP sessions through the in-process MCP client on a machine without a GPU: compile-only, for gfx90a where an
AMD compiler is installed (resources from the offline compile) and for NVIDIA when $PEAK_HIP_ARCH says sm_..."""

from __future__ import annotations

import pytest

from peak_mcp.api.responses import whole_answer
from peak_mcp.backends import amd_offline
from tests.conftest import EXAMPLES, has_device

pytestmark = pytest.mark.anyio
if has_device("hip"):
    pytestmark = [pytest.mark.anyio, pytest.mark.skip(reason="a HIP GPU is present: tests/test_hip_gpu.py runs it")]

SMALL = {"M": 64, "N": 48, "K": 32}
MFMA = (EXAMPLES / "hip" / "mfma_f32.hip").read_text()
TILED = (EXAMPLES / "hip" / "smem_tiled.hip").read_text()


async def _start(client, **extra) -> dict:
    result = await client.call_tool("start_session", {"backend": "hip", "sizes": SMALL, **extra})
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def _submit(client, session_id: str, source: str) -> dict:
    result = await client.call_tool("submit_kernel", {"session_id": session_id, "source": source})
    assert not result.is_error, result.content[0].text
    return whole_answer("submit_kernel", result)  # its compile log: in the text


async def test_doctor_reports_hips_compilers_and_what_is_missing(make_client) -> None:
    async with make_client() as (client, _):
        report = (await client.call_tool("doctor", {})).structured_content
        entries = [b for b in report["backends"] if b["backend"] == "hip"]
        assert len(entries) == 1, entries  # the registered backend, not a placeholder beside it
        status = entries[0]
        assert status["usable"] and not status["can_run"]
        assert status["compiler"]["nvidia"]["available"]
        assert status["compiler"]["nvidia"]["header"] == "<hip>/hip_runtime.h"  # a label, not the host's path
        assert {m["what"] for m in status["missing"]} >= {"hip-python", "HIP GPU"}
        assert all(m["fix"] for m in status["missing"])


@pytest.mark.skipif(amd_offline.find_toolchain() is None, reason=f"no AMD compiler: {amd_offline.INSTALL_HINT}")
async def test_session_without_a_gpu_targets_gfx90a_end_to_end(make_client) -> None:
    async with make_client() as (client, _):
        session = await _start(client, dtype="f16")
        sid = session["session_id"]
        device = session["device"]
        assert device["name"] == "compile-only gfx90a (no AMD GPU)" and device["index"] == -1
        assert (device["arch"], device["family"], device["profile"]) == ("gfx90a", "cdna2", "mi250x.toml")
        v0 = session["version_0"]
        assert v0["status"] == "compiled" and "gfx90a" in v0["message"]
        assert v0["compile"]["resources"]["vgprs"] > 0 and v0["compile"]["resources"]["occupancy_waves_per_simd"]

        # The catalog resolves for this device: tensor cores become AMD's MFMA text.
        listed = (await client.call_tool("list_transformations", {"backend": "hip", "device": "gfx90a"}))
        assert "amd-mfma" in {t["id"] for t in listed.structured_content["transformations"]}
        step = (await client.call_tool("apply_transformation", {"session_id": sid, "transformation":
                                                                "tensor-cores"})).structured_content
        assert step["resolved_transformation"] == "amd-mfma", step

        mfma = await _submit(client, sid, MFMA)
        assert mfma["status"] == "compiled" and mfma["head"] == 0  # nothing ran: head stays on v0
        resources = mfma["compile"]["resources"]
        assert resources["mfma_instructions"] > 0 and resources["agprs"] > 0 and resources["lds_bytes"] == 17408

        broken = await _submit(client, sid, TILED.replace("acc += ", "acc += undeclared_name + "))
        line = next(n for n, t in enumerate(TILED.splitlines(), 1) if "acc += " in t)
        assert broken["status"] == "compile_error" and f"kernel.hip:{line}:" in broken["compile"]["log"]
        outside = await _submit(client, sid, '#include "/etc/passwd"\n' + TILED)
        assert outside["status"] == "compile_error" and "kernel.hip:1: error:" in outside["compile"]["log"]
        rows = (await client.call_tool("history", {"session_id": sid})).structured_content["rows"]
        assert [r["status"] for r in rows] == ["compiled", "compiled", "compile_error", "compile_error"]


async def test_session_with_an_sm_target_runs_hip_through_the_cuda_header(make_client, settings) -> None:
    settings.hip_arch = "sm_90a"  # passed to the probe and the workers (subprocesses) explicitly
    async with make_client() as (client, _):
        session = await _start(client)
        sid = session["session_id"]
        assert session["device"]["name"] == "compile-only sm_90a (HIP on NVIDIA, no GPU)"
        assert session["device"]["family"] == "hopper"
        assert session["version_0"]["status"] == "compiled"
        assert session["version_0"]["compile"]["resources"]["registers"] > 0
        tiled = await _submit(client, sid, TILED)
        assert tiled["status"] == "compiled" and tiled["compile"]["resources"]["static_shared_bytes"] == 16 * 33 * 4
        refused = await _submit(client, sid, MFMA)
        assert refused["status"] == "compile_error"
        assert "AMD-only, cannot compile for NVIDIA (sm_90a)" in refused["compile"]["log"]
        listed = (await client.call_tool("list_transformations", {"backend": "hip", "device": "sm_90a"}))
        assert "amd-mfma" not in {t["id"] for t in listed.structured_content["transformations"]}


async def test_list_problems_offers_hip_with_its_abi(make_client) -> None:
    async with make_client() as (client, _):
        problems = whole_answer("list_problems", await client.call_tool("list_problems", {"problem": "matmul"}))
        matmul = next(p for p in problems["problems"] if p["name"] == "matmul")
        assert "hip" in matmul["backends"] and "<hip/hip_runtime.h>" in matmul["abi"]["hip"]
