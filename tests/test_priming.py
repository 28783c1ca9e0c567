"""A worker's first validation pays one-time costs (cupy compiling its kernels on a cold cache) that must not be taken
for a hung kernel, and the heartbeat that covers them must not cover the agent's kernel."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from peak_mcp.backends.hip_portability import hip_spelling
from peak_mcp.backends.registry import launch_spec
from peak_mcp.problems.shipped import get_problem
from peak_mcp.runner.heartbeat import heartbeat
from peak_mcp.runner.messages import EvaluateJob
from peak_mcp.runner.pool import DevicePool, JobFailed
from peak_mcp.runner.replies import EvaluateResult
from tests.conftest import ROOT, has_device, hip_platform, skip_reason

UNALIGNED = {"M": 100, "N": 77, "K": 53}


def test_heartbeat_beats_while_the_body_runs_and_stops_after() -> None:
    beats: list[float] = []
    with heartbeat(lambda _message: beats.append(time.monotonic()), "preparing", every_s=0.05):
        time.sleep(0.3)
    ended, during = time.monotonic(), len(beats)
    time.sleep(0.2)
    assert during >= 3, "a body that outlasts several periods must be covered by several beats"
    assert len(beats) == during and beats[-1] <= ended, "no beat may follow the body"


def test_heartbeat_stops_when_the_body_raises() -> None:
    beats: list[str] = []
    with pytest.raises(RuntimeError, match="boom"), heartbeat(beats.append, "x", every_s=0.02):
        raise RuntimeError("boom")
    time.sleep(0.1)
    assert beats == ["x"], "one note as the work starts, none after it failed"


def _job(backend: str, source: str) -> EvaluateJob:
    spec = launch_spec(source, backend, get_problem("matmul").symbols)
    return EvaluateJob(problem="matmul", dtype="f32", sizes=UNALIGNED, source=source, spec=spec,
                       steps=["compile", "validate", "benchmark"], time_budget_s=0.05)


def _backends() -> list[object]:
    hip = pytest.mark.skipif(not has_device("hip") or hip_platform() != "nvidia",
                             reason=f"no HIP GPU on NVIDIA: {skip_reason('hip')}")
    cuda = pytest.mark.skipif(not has_device("cuda"), reason=f"no CUDA GPU: {skip_reason('cuda')}")
    return [pytest.param("cuda", marks=cuda), pytest.param("hip", marks=hip)]


@pytest.mark.gpu
@pytest.mark.parametrize("backend", _backends())
def test_a_cold_cache_is_not_a_hung_kernel_and_a_hang_is_still_caught(backend: str, tmp_path: Path) -> None:
    """An empty cupy kernel cache (a fresh machine) and a 3 s hang detector: the naive kernel, the first job of its
    worker, must validate and benchmark; then a hanging kernel on a fresh worker must still time out."""
    pool = DevicePool(env={**os.environ, "CUPY_CACHE_DIR": str(tmp_path / "cupy")})
    stages: list[str] = []
    try:
        result = pool.run(backend, 0, _job(backend, get_problem("matmul").naive_kernel(backend, "f32")),
                          inactivity_s=3, total_s=300, progress=stages.append)
        assert isinstance(result, EvaluateResult)
        assert result.validation is not None and result.validation.passed, result.validation
        assert result.timing is not None and result.timing.median_ms > 0
        assert any(s.startswith("preparing the checks for matmul f32") for s in stages), stages
        assert any(tmp_path.joinpath("cupy").iterdir()), "the run should have filled the cold cache"
        pool.close()  # a fresh worker: it prepares the checks again (warm cache now), then meets the hang
        hang = (ROOT / "examples" / "faults" / "hang.cu").read_text()
        if backend == "hip":
            hang = hip_spelling(hang)
        started = time.monotonic()
        with pytest.raises(JobFailed) as stopped:
            pool.run(backend, 0, _job(backend, hang), inactivity_s=3, total_s=300)
        assert stopped.value.kind == "timeout", stopped.value
        assert time.monotonic() - started < 60
    finally:
        pool.close()


def test_heartbeat_falls_silent_after_its_limit() -> None:
    """Priming wedged on a broken device must not be covered for ever: the pool's no-progress timer takes over."""
    beats: list[float] = []
    started = time.monotonic()
    with heartbeat(lambda _message: beats.append(time.monotonic() - started), "x", every_s=0.02, limit_s=0.1):
        time.sleep(0.4)
    assert len(beats) >= 3 and beats[-1] < 0.2
