"""HLSL on an NVIDIA GPU with cupy: the validator computes beside Vulkan on the same GPU (inputs, float64 reference,
checks), the verdict says so, and wrong kernels are still caught. Skipped without an NVIDIA Vulkan device, cupy or
CUDA. Sizes: PEAK_TEST_HLSL_SIZE (default 2048, cubed); run with -s to see the validate phase's wall time."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from peak_mcp.evaluation.steps import CUDA, cuda_beside
from peak_mcp.problems.shipped import get_problem
from peak_mcp.runner.messages import EvaluateJob
from peak_mcp.runner.pool import DevicePool
from peak_mcp.runner.replies import EvaluateResult
from tests.conftest import EXAMPLES, has_device, probe, skip_reason
from tests.test_hlsl_backend import spec_of
from tests.test_hlsl_reference import wrong_kernels


def _why_not() -> str | None:
    if not has_device("hlsl"):
        return f"no Vulkan device: {skip_reason('hlsl')}"
    device = probe()["hlsl"]["devices"][0]
    if device["properties"].get("vendor") != "nvidia":
        return f"the Vulkan device is {device['name']}, not an NVIDIA GPU"
    if importlib.util.find_spec("cupy") is None:
        return "cupy is not installed"
    if not has_device("cuda"):
        return f"no CUDA GPU: {skip_reason('cuda')}"
    return None


pytestmark = [pytest.mark.gpu, pytest.mark.vulkan, pytest.mark.anyio]
if (why := _why_not()) is not None:
    pytestmark.append(pytest.mark.skip(reason=why))

SIZE = int(os.environ.get("PEAK_TEST_HLSL_SIZE", "2048"))
SIZES = dict.fromkeys(("M", "N", "K"), SIZE)


def _why_host() -> str:
    """Why this process would validate on the host (the worker decides the same way)."""
    return cuda_beside(probe()["hlsl"]["devices"][0]["properties"].get("device_uuid")).why


async def _submit(client, session_id: str, source: str) -> dict:
    result = await client.call_tool("submit_kernel", {"session_id": session_id, "source": source})
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def test_the_reference_runs_on_the_gpu_and_wrong_kernels_are_caught(make_client, settings) -> None:
    settings.job_total_timeout_s = 1800
    async with make_client() as (client, _):
        started = await client.call_tool("start_session", {"backend": "hlsl", "dtype": "f32", "sizes": SIZES})
        assert not started.is_error, started.content[0].text
        session = started.structured_content
        assert session["version_0"]["status"] == "benchmarked", session["version_0"]["message"]
        good = await _submit(client, session["session_id"], (EXAMPLES / "hlsl" / "register_blocked.hlsl").read_text())
        assert good["status"] == "benchmarked", good["message"]
        validation = good["validation"]
        assert validation["reference"] == CUDA, (validation, _why_host())
        print(f"\nHLSL {SIZE}^3 f32, reference {validation['reference']}: validate phase "
              f"{good['phases']['validate']:.3f} s ({validation['trials']} trials), benchmark "
              f"{good['phases']['benchmark']:.3f} s, median {good['performance']['median_ms']:.3f} ms")
        for name, source in sorted(wrong_kernels(SIZE).items()):
            bad = await _submit(client, session["session_id"], source)
            assert bad["status"] == "failed" and bad["failure"] == "wrong_result", (name, bad["message"])
            assert bad["validation"]["reference"] == CUDA, bad["validation"]
            print(f"{name}: caught ({bad['validation']['count']} elements over their bound), validate phase "
                  f"{bad['phases']['validate']:.3f} s")


def test_a_cold_cupy_cache_is_not_a_hung_kernel(tmp_path: Path) -> None:
    """cupy beside Vulkan compiles its kernels on a cold cache too: the worker prepares the checks first, under a
    heartbeat, so a 3 s hang detector does not take that for the kernel."""
    pool = DevicePool(env={**os.environ, "CUPY_CACHE_DIR": str(tmp_path / "cupy")})
    source = get_problem("matmul").naive_kernel("hlsl", "f32")
    job = EvaluateJob(problem="matmul", dtype="f32", sizes={"M": 100, "N": 77, "K": 53}, source=source,
                      spec=spec_of(source), steps=["compile", "validate", "benchmark"], time_budget_s=0.05)
    stages: list[str] = []
    try:
        result = pool.run("hlsl", 0, job, inactivity_s=3, total_s=300, progress=stages.append)
    finally:
        pool.close()
    assert isinstance(result, EvaluateResult)
    assert result.validation is not None and result.validation.passed, result.validation
    assert result.validation.reference == CUDA, (result.validation, _why_host())
    assert any(s.startswith("preparing the checks for matmul f32") for s in stages), stages
    assert any(tmp_path.joinpath("cupy").iterdir()), "the run should have filled the cold cache"
