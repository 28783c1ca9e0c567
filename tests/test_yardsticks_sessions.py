"""The yardsticks every problem has, in sessions: % of the roofline in every report (the bandwidth measured on CUDA,
else the device profile's), and torch eager / torch.compile from a problem's torch_reference on a CUDA device."""

from __future__ import annotations

from typing import Any

import pytest

from peak_mcp.core.devices import Device
from peak_mcp.evaluation.phases import Baseline, Timing
from peak_mcp.store.records import VersionRow
from peak_mcp.store.reports import markdown_table, performance, roofline_ms
from tests.conftest import has_device

pytestmark = pytest.mark.anyio
VULKAN = pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")
GPU = pytest.mark.skipif(not has_device("cuda"), reason="no CUDA device")


def test_roofline_takes_the_larger_term_and_the_measured_bandwidth_first() -> None:
    device = Device(memory_bandwidth_gbps=1000.0, peak_tflops={"fp32": 10.0})
    # 1e9 bytes at 1000 GB/s: 1 ms; 1e9 flops at 10 TFLOP/s: 0.1 ms
    assert roofline_ms(1e9, 1e9, device, "fp32", None) == pytest.approx(1.0)
    measured = Baseline(available=False, copy_gbps=2000.0)
    assert roofline_ms(1e9, 1e9, device, "fp32", measured) == pytest.approx(0.5)
    assert roofline_ms(1e11, 1e6, device, "fp32", None) == pytest.approx(10.0)  # compute bound
    # a term with work and no rate: undefined, not a guess
    assert roofline_ms(1e9, 1e9, Device(memory_bandwidth_gbps=1000.0), "fp32", None) is None
    assert roofline_ms(0, 1e9, Device(memory_bandwidth_gbps=1000.0), "fp32", None) == pytest.approx(1.0)
    assert roofline_ms(0, 1e9, Device(), "fp32", None) is None


def test_performance_has_roofline_and_torch_ratios_rounded() -> None:
    version = VersionRow.model_validate({"session_id": "s", "number": 0, "status": "benchmarked", "source": "",
                                         "origin": "naive", "created_at": 0.0,
                                         "timing": Timing(median_ms=2.0).model_dump()})
    baseline = Baseline(available=False, torch_eager_ms=3.0, torch_compile_ms=1.0)
    perf = performance(version, {0: version}, baseline, Device(), "fp32", roofline=0.5)
    assert perf is not None
    assert perf["pct_of_roofline"] == 25.0 and perf["x_torch_eager"] == 1.5 and perf["x_torch_compile"] == 0.5
    row = {"version": 0, "parent": None, "origin": "naive", "transformation": None, "attempt": None,
           "status": "benchmarked", "failure": None, "median_ms": 2.0, "tflops": None, "speedup_vs_parent": None,
           "speedup_vs_v0": 1.0, "pct_of_vendor": None, "pct_of_peak": None, "pct_of_roofline": 25.0,
           "x_torch_eager": 1.5, "x_torch_compile": 0.5}
    table = markdown_table([row])
    assert "% roofline | × torch eager | × torch.compile |" in table and "| 25.0 | 1.50 | 0.50 |" in table
    assert "torch" not in markdown_table([{**row, "x_torch_eager": None, "x_torch_compile": None}])


async def _call(client: Any, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return result.structured_content or {}


@VULKAN
async def test_an_hlsl_session_reports_the_roofline_where_the_device_profile_gives_a_bandwidth(make_client) -> None:
    """lavapipe: no CUDA, so no copy bandwidth is measured and no torch yardstick is timed (said once, in the
    baseline); % of roofline comes from the device profile's bandwidth, and is absent where the profile has none
    (lavapipe matches no profile: there the field is left out rather than guessed)."""
    async with make_client() as (client, service):
        session = await _call(client, "start_session", {"problem": "softmax", "backend": "hlsl", "dtype": "f32",
                                                        "sizes": {"ROWS": 64, "COLS": 100}})
        baseline = session["baseline"]
        assert "CUDA devices only" in baseline["torch_note"] and "copy_gbps" not in baseline
        perf = session["version_0"]["performance"]
        device = service.device_of(service.store.session(session["session_id"]))
        # The reason names what stands in for a vendor library on this device, from the server's profile of it.
        assert ("roofline" if device.memory_bandwidth_gbps else "no yardstick here") in baseline["reason"]
        if device.memory_bandwidth_gbps:
            assert perf["pct_of_roofline"] > 0
        else:
            assert "pct_of_roofline" not in perf
        assert "x_torch_eager" not in perf
        history = await client.call_tool("history", {"session_id": session["session_id"]})
        # the column where there is a roofline, else one line saying why there is none
        assert ("% roofline |" in history.content[0].text) == bool(device.memory_bandwidth_gbps)
        assert ("no known peak or bandwidth" in history.content[0].text) != bool(device.memory_bandwidth_gbps)
        assert ("pct_of_roofline" in history.structured_content["rows"][0]) == bool(device.memory_bandwidth_gbps)


@pytest.mark.gpu
@GPU
async def test_torch_yardsticks_on_a_cuda_softmax_session(make_client) -> None:
    pytest.importorskip("torch")
    async with make_client() as (client, _):
        session = await _call(client, "start_session", {"problem": "softmax", "backend": "cuda", "dtype": "f32",
                                                        "sizes": {"ROWS": 1024, "COLS": 1024}})
        baseline = session["baseline"]
        assert baseline["copy_gbps"] > 0
        assert baseline["torch_eager_ms"] > 0, baseline.get("torch_note")
        perf = session["version_0"]["performance"]
        assert perf["pct_of_roofline"] > 0 and perf["x_torch_eager"] > 0
        if baseline.get("torch_compile_ms"):
            assert perf["x_torch_compile"] > 0 and baseline["torch_compile_s"] >= 0
        else:
            assert "torch.compile" in baseline["torch_note"]
        history = await client.call_tool("history", {"session_id": session["session_id"]})
        assert "× torch eager |" in history.content[0].text


def test_history_drops_an_empty_times_v0_column_and_marks_noise_against_v0() -> None:
    """agent44: a session whose v0 (a reference kernel) was refused showed a ×v0 column empty in every row, and
    ×v0 carried no noise mark where ×parent did."""
    def row(version: int, **fields: Any) -> dict[str, Any]:
        return {"version": version, "parent": version - 1 if version > 1 else None, "origin": "submit",
                "transformation": None, "attempt": None, "status": "benchmarked", "failure": None,
                "median_ms": 2.0, "tflops": None, "speedup_vs_parent": None, "speedup_vs_v0": None, **fields}

    refused = row(0, status="invalid_annotation", failure="annotation", median_ms=None, origin="reference")
    table = markdown_table([refused, row(1), row(2, speedup_vs_parent=0.42, change_vs_parent="within noise")])
    assert "×v0" not in table.splitlines()[0] and "no ×v0 column: v0 was not timed (invalid_annotation)" in table
    assert "| 0.42 (noise) |" in table
    assert "A ratio with no mark is faster beyond noise." in table  # agent44b: unmarked ratios were unexplained
    timed = markdown_table([row(0), row(1, speedup_vs_v0=2.4, change_vs_v0="within noise", speedup_vs_parent=2.4,
                                    change_vs_parent="within noise")])
    assert "| ×parent | ×v0 |" in timed and "| 2.40 (noise) | 2.40 (noise) |" in timed and "no ×v0" not in timed
