"""The Ray path on a local Ray instance (fake GPUs): device workers as actors with num_gpus=1, each hosting the same
worker code (here the stand-in of tests/stand_in_devices.py), compile-only jobs as Ray tasks, the tuning fan-out
over actors, and an actor lost mid-tune (its node gone) losing nothing. Skips where Ray is not installed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from peak_mcp.core.config import Settings
from peak_mcp.core.launch import LaunchSpec
from peak_mcp.loop.service import PeakService
from peak_mcp.runner.messages import EvaluateJob
from peak_mcp.runner.replies import EvaluateResult
from tests.test_fanout import H100, H200, SIZES, TUNED, _shim

ray = pytest.importorskip("ray")
RayDevicePool = pytest.importorskip("peak_mcp.runner.ray_pool").RayDevicePool
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def local_ray():
    # 3 fake GPUs on this CPU machine; the actors import this checkout's peak_mcp
    ray.init(num_cpus=6, num_gpus=3, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    yield ray
    ray.shutdown()


class RayRig:
    def __init__(self, tmp_path: Path, names: list[str], **per_device: dict[str, Any]) -> None:
        self.log = tmp_path / "jobs.jsonl"
        self.log.touch()
        devices = [{"backend": "cuda", "index": i, "name": n, "properties": {}} for i, n in enumerate(names)]

        def options(_backend: str, index: int) -> dict[str, Any]:
            return {"name": names[max(index, 0)], "log": str(self.log), "delay_s": 0.05,
                    **per_device.get(f"d{index}", {})}

        self.pool = RayDevicePool(python=_shim(tmp_path), options=options)
        self.service = PeakService(Settings(data_dir=tmp_path / "data"), pool=self.pool, probe=lambda: {
            "cuda": {"backend": "cuda", "devices": devices, "compiler": {"available": True}, "missing": []}})

    def session(self, device: int) -> tuple[str, int]:
        sid = self.service.start_session("matmul", "cuda", "f32", SIZES, device=device).session_id
        report = self.service.submit_kernel(sid, TUNED)
        assert report.status == "benchmarked", report.message
        self.log.write_text("")
        return sid, report.version

    def jobs(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture
def rig(local_ray, tmp_path: Path):
    made: list[RayRig] = []

    def make(names: list[str], **per_device: dict[str, Any]) -> RayRig:
        made.append(RayRig(tmp_path, names, **per_device))
        return made[-1]

    yield make
    for r in made:
        r.service.close()


def test_a_tune_fans_out_over_ray_actors_of_one_model_and_retimes_on_the_sessions_own(rig) -> None:
    r = rig([H200, H100, H200])
    sid, version = r.session(2)
    report = r.service.tune(sid, version, max_configs=16)
    assert report.devices == [0, 2] and report.tried == 16 and report.best is not None
    assert report.best.params == {"A": 1, "B": 2}
    jobs = r.jobs()
    tuned = {j["ray_device"] for j in jobs if j["type"] == "tune"}
    assert tuned == {"0", "2"}  # each ran in the actor of its device, the H100's never
    assert all(j["device"] == 0 for j in jobs)  # inside an actor its one GPU is device 0 (CUDA_VISIBLE_DEVICES)
    final = [j for j in jobs if j["type"] == "evaluate"]
    assert [j["ray_device"] for j in final] == ["2", "2"] and final[0]["params"] == {"A": 1, "B": 2}  # then own


def test_an_actor_lost_mid_tune_loses_nothing(rig) -> None:
    """Device 1's tune jobs kill their actor (as a lost node does): its chunk goes to device 0; a configuration
    that kills its worker inside an actor fails alone."""
    r = rig([H200, H200], d0={"die_on": 9}, d1={"kill_host": True})
    sid, version = r.session(0)
    report = r.service.tune(sid, version, max_configs=16)
    assert report.tried == 16 and len(report.results) == 16
    assert {x.params["A"] for x in report.results if x.status == "failed"} == {9}
    assert sum(x.status == "ok" for x in report.results) == 12 and report.devices == [0]
    assert r.pool.restarts >= 1  # the lost actor was dropped; the next job on device 1 starts a new one


def test_compile_only_jobs_run_as_ray_tasks(rig) -> None:
    r = rig([H200])
    job = EvaluateJob(problem="matmul", dtype="f32", sizes=SIZES, source=TUNED,
                      spec=LaunchSpec(entry="k", line=1), steps=["compile"])
    result = r.pool.run("cuda", -1, job, inactivity_s=60, total_s=120)
    assert isinstance(result, EvaluateResult) and result.compile and result.compile.ok
    assert r.pool.queue_length("cuda", -1) == 0 and not r.pool._actors  # no actor: a task


def test_the_cluster_probe_lists_one_device_per_gpu(local_ray) -> None:
    from peak_mcp.runner.ray_pool import cluster_probe

    report = cluster_probe(lambda: {"cuda": {"devices": [{"index": 0, "name": H200}]}, "hlsl": {"devices": []}})
    assert [d["index"] for d in report["cuda"]["devices"]] == [0, 1, 2]
    assert {d["name"] for d in report["cuda"]["devices"]} == {H200} and report["hlsl"]["devices"] == []


def test_serve_on_ray_wires_the_pool_and_the_probe_and_compiles_in_a_ray_task(local_ray, tmp_path: Path) -> None:
    """`build(ray=...)` as `peak-mcp serve --ray auto` does: the probe runs in a Ray task holding a GPU, and a
    compile-only CUDA session (no GPU here) compiles its naive kernel with the real worker inside a Ray task."""
    from peak_mcp.api.app import build
    from tests.conftest import has_device, probe

    if not probe().get("cuda", {}).get("compiler", {}).get("available"):
        pytest.skip("no CUDA compiler (cuda-python) on this machine")
    _, service = build(Settings(data_dir=tmp_path / "data"), ray="auto")
    try:
        assert isinstance(service.pool, RayDevicePool) and service.settings.ray == "auto"
        if has_device("hlsl"):  # lavapipe, seen from a task holding one of the 3 fake GPUs, listed per GPU
            assert [d["index"] for d in service.probe()["hlsl"]["devices"]] == [0, 1, 2]
        info = service.start_session("matmul", "cuda", "f32", SIZES)
        assert info.version_0 is not None and info.version_0.status == "compiled", info.version_0
        assert service.pool.queue_length("cuda", -1) == 0 and not service.pool._actors
    finally:
        service.close()
