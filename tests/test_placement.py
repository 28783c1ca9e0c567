"""Placement on one host: start_session(device=...) by index, name pattern or the least loaded; queues counted."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from peak_mcp.core.config import Settings
from peak_mcp.core.errors import InvalidInput
from peak_mcp.core.launch import parse_annotation
from peak_mcp.loop.service import PeakService
from peak_mcp.runner.messages import EvaluateJob
from peak_mcp.runner.pool import DevicePool
from tests.conftest import has_device

TWO = [{"backend": "cuda", "index": 0, "name": "NVIDIA H100 80GB HBM3", "properties": {}},
       {"backend": "cuda", "index": 1, "name": "NVIDIA H200", "properties": {}}]


@pytest.fixture
def service(tmp_path: Path):
    s = PeakService(Settings(data_dir=tmp_path), probe=lambda: {"cuda": {"devices": TWO, "compiler": {}}})
    yield s
    s.close()


def test_index_pattern_and_auto(service: PeakService) -> None:
    assert service.place("cuda", TWO, 1)["index"] == 1
    assert service.place("cuda", TWO, "1")["index"] == 1
    assert service.place("cuda", TWO, "h200")["index"] == 1
    assert service.place("cuda", TWO, "auto")["index"] == 0  # equal load: the lowest index
    # Sessions already on device 0: auto spreads the next one to device 1.
    service.store.create_session(problem="matmul", backend="cuda", dtype="f32", sizes={"M": 8, "N": 8, "K": 8},
                                 device=TWO[0]["name"], device_index=0, label=None)
    assert service.place("cuda", TWO, None)["index"] == 1


@pytest.mark.parametrize("device", ["A100", 7, True])
def test_a_device_that_is_not_there_is_refused_with_the_list(service: PeakService, device: object) -> None:
    with pytest.raises(InvalidInput) as refused:
        service.place("cuda", TWO, device)  # type: ignore[arg-type]
    assert "device" in str(refused.value)
    if device != 7 and device is not True:
        assert "0: NVIDIA H100" in str(refused.value) and "1: NVIDIA H200" in str(refused.value)


def test_queue_length_counts_waiting_and_running_jobs(tmp_path: Path) -> None:
    """Two jobs on one (compile-only) worker: while the first runs, both count; afterwards none."""
    pool = DevicePool()
    source = ('// peak: entry=k grid=(1, 1, 1) block=(32, 1, 1)\n'
              'extern "C" __global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {}\n')
    spec = parse_annotation(source, needs=("entry", "grid", "block"), symbols=("M", "N", "K"))
    job = EvaluateJob(problem="matmul", dtype="f32", sizes={"M": 8, "N": 8, "K": 8}, source=source,
                      spec=spec.model_dump(), steps=["compile"])
    seen: list[int] = []
    threads = [threading.Thread(target=pool.run, args=("cuda", -1, job), kwargs={"inactivity_s": 60, "total_s": 120})
               for _ in range(2)]
    try:
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            seen.append(pool.queue_length("cuda", -1))
            time.sleep(0.005)
        for t in threads:
            t.join()
    finally:
        pool.close()
    assert max(seen) == 2 and pool.queue_length("cuda", -1) == 0


@pytest.mark.anyio
@pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")
async def test_start_session_places_by_pattern_and_says_what_exists(make_client) -> None:
    async with make_client() as (client, service):
        name = service.probe()["hlsl"]["devices"][0]["name"]
        ok = await client.call_tool("start_session", {"backend": "hlsl", "sizes": {"M": 16, "N": 16, "K": 16},
                                                      "device": name.split()[0].lower()})
        assert not ok.is_error, ok.content[0].text
        assert ok.structured_content["device"]["name"] == name
        refused = await client.call_tool("start_session", {"backend": "hlsl", "device": "no-such-gpu"})
        assert refused.is_error and "no hlsl device matches" in refused.content[0].text
        doctor = (await client.call_tool("doctor", {})).structured_content
        hlsl = next(b for b in doctor["backends"] if b["backend"] == "hlsl")
        assert all("queued_jobs" in d for d in hlsl["devices"])
