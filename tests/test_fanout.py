"""Tuning fans out over every idle device of the session's model: a stand-in worker (tests/stand_in_devices.py)
poses as GPUs of two models through the real DevicePool and service; nothing else is stood in for."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from peak_mcp.core.config import Settings
from peak_mcp.core.devices import Device
from peak_mcp.core.launch import LaunchSpec
from peak_mcp.evaluation.configs import Config
from peak_mcp.loop.service import PeakService
from peak_mcp.loop.tuning.fanout import FanOut, tuning_devices
from peak_mcp.runner.messages import TuneJob
from peak_mcp.runner.pool import DevicePool
from tests.conftest import stand_in_python

H200, H100 = "NVIDIA H200", "NVIDIA H100 80GB HBM3"
SIZES = {"M": 64, "N": 64, "K": 64}
# 4 x 4 = 16 configurations; the stand-in times each at sum(values) / 100 ms, so A=1 B=2 is the fastest.
TUNED = ("// peak: entry=k grid=(1, 1, 1) block=(32, 1, 1)\n"
         "// peak: params A=[8, 1, 9, 7] B=[20, 2, 30, 40]\n"
         'extern "C" __global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {}\n')


def _shim(tmp_path: Path) -> str:
    return stand_in_python(tmp_path, "stand_in_devices.py")


class Rig:
    """A service on stand-in devices `names` (index -> model name), with per-device options, and the job log."""

    def __init__(self, tmp_path: Path, names: list[str], **per_device: dict[str, Any]) -> None:
        self.log = tmp_path / "jobs.jsonl"
        devices = [{"backend": "cuda", "index": i, "name": n, "properties": {}} for i, n in enumerate(names)]
        settings = Settings(data_dir=tmp_path / "data")

        def options(_backend: str, index: int) -> dict[str, Any]:
            return {"name": names[index], "log": str(self.log), "delay_s": 0.05, **per_device.get(f"d{index}", {})}

        self.pool = DevicePool(python=_shim(tmp_path), lock_dir=settings.data_dir / "locks", options=options)
        self.service = PeakService(settings, pool=self.pool, probe=lambda: {
            "cuda": {"backend": "cuda", "devices": devices, "compiler": {"available": True}, "missing": []}})

    def session(self, device: int) -> tuple[str, int]:
        sid = self.service.start_session("matmul", "cuda", "f32", SIZES, device=device).session_id
        report = self.service.submit_kernel(sid, TUNED)
        assert report.status == "benchmarked", report.message
        self.log.write_text("")  # from here on: the tune's jobs only
        return sid, report.version

    def jobs(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def close(self) -> None:
        self.service.close()


@pytest.fixture
def rig(tmp_path: Path, request: pytest.FixtureRequest):
    made: list[Rig] = []

    def make(names: list[str], **per_device: dict[str, Any]) -> Rig:
        made.append(Rig(tmp_path, names, **per_device))
        return made[-1]

    yield make
    for r in made:
        r.close()


def _tuned_configs(jobs: list[dict[str, Any]]) -> dict[int, list[dict[str, int]]]:
    by_device: dict[int, list[dict[str, int]]] = {}
    for job in jobs:
        if job["type"] == "tune":
            by_device.setdefault(job["device"], []).extend(job["configs"])
    return by_device


@pytest.mark.parametrize("names", [[H200, H200, H100], [H200, H100, H200, H200]], ids=["2+1", "3+1"])
def test_batches_fan_out_over_same_model_devices_and_the_best_is_retimed_on_the_sessions_own(
        rig, names: list[str]) -> None:
    r = rig(names)
    same = [i for i, n in enumerate(names) if n == H200]
    own = same[-1]  # the session sits on the last H200: helpers are found below it
    sid, version = r.session(own)
    report = r.service.tune(sid, version, max_configs=16)
    jobs = r.jobs()
    by_device = _tuned_configs(jobs)
    assert sorted(by_device) == same == report.devices  # every H200 measured, the H100 never did
    assert names.index(H100) not in {j["device"] for j in jobs}
    assert report.tried == 16 and len(report.results) == 16
    assert sorted(json.dumps(c, sort_keys=True) for cs in by_device.values() for c in cs) == sorted(
        json.dumps(r.params, sort_keys=True) for r in report.results)  # each configuration measured once
    assert {res.device for res in report.results} == set(same)
    assert report.best is not None and report.best.params == {"A": 1, "B": 2}
    # the chunks of one batch ran at the same time on different devices
    tunes = [j for j in jobs if j["type"] == "tune"]
    assert any(a["device"] != b["device"] and a["start"] < b["end"] and b["start"] < a["end"]
               for a in tunes for b in tunes)
    # then the full re-time of the best: after the search, on the session's own device, at the best configuration,
    # and the version's own configuration right after it (the verdict compares timings of one moment)
    final = [j for j in jobs if j["type"] == "evaluate"]
    assert [(j["device"], j["params"]) for j in final] == [(own, {"A": 1, "B": 2}), (own, {"A": 8, "B": 20})]
    assert final[0]["start"] >= max(j["end"] for j in tunes)
    stored = r.service.store.version(sid, version)
    assert stored.tuning and stored.tuning.devices == same
    assert stored.timing and stored.timing.params == {"A": 1, "B": 2}


def test_a_busy_device_is_not_taken(rig) -> None:
    """Device 1 (same model) runs another job for the whole tune: every batch stays on device 0."""
    r = rig([H200, H200], d1={"delay_s": 0.3})
    sid, version = r.session(0)
    other = TuneJob(problem="matmul", dtype="f32", sizes=SIZES, source=TUNED, spec=LaunchSpec(entry="k", line=1),
                    configs=[{"Z": i} for i in range(20)])  # 6 s on device 1
    busy = threading.Thread(target=r.pool.run, args=("cuda", 1, other), kwargs={"inactivity_s": 60, "total_s": 60})
    busy.start()
    try:
        while r.pool.queue_length("cuda", 1) == 0:
            time.sleep(0.01)
        report = r.service.tune(sid, version, max_configs=16)
        assert r.pool.queue_length("cuda", 1) == 1  # still busy when the tune ended
    finally:
        busy.join()
    assert report.devices == [0] and report.tried == 16
    tuned = _tuned_configs(r.jobs())
    assert set(tuned) == {0, 1} and all("Z" in c for c in tuned[1])  # device 1 ran only the other job


def test_a_configuration_that_kills_its_worker_fails_alone_and_the_rest_go_again_elsewhere(rig) -> None:
    r = rig([H200, H200], d0={"die_on": 9}, d1={"die_on": 9})  # A=9: a kernel fault on whichever device
    sid, version = r.session(0)
    report = r.service.tune(sid, version, max_configs=16)
    assert report.tried == 16 and len(report.results) == 16  # nothing lost
    failed = [x for x in report.results if x.status == "failed"]
    assert {x.params["A"] for x in failed} == {9} and len(failed) == 4
    assert all("worker died" in (x.reason or "") for x in failed), [x.reason for x in failed]
    assert sum(x.status == "ok" for x in report.results) == 12
    assert report.best is not None and report.best.params == {"A": 1, "B": 2}
    assert r.pool.restarts >= 4 and report.devices == [0, 1]


def test_a_device_lost_mid_tune_hands_its_configurations_to_another(rig) -> None:
    """Device 1's worker dies on every tune job before naming a configuration: its chunks run on device 0."""
    r = rig([H200, H200], d1={"die_tune": True})
    sid, version = r.session(0)
    report = r.service.tune(sid, version, max_configs=16)
    assert report.tried == 16 and all(x.status == "ok" for x in report.results)
    assert report.devices == [0] and {x.device for x in report.results} == {0}
    assert sorted(json.dumps(c, sort_keys=True) for c in _tuned_configs(r.jobs())[0]) == sorted(
        json.dumps(x.params, sort_keys=True) for x in report.results)


def test_the_only_device_lost_is_an_error_as_before(rig) -> None:
    r = rig([H200, H100], d0={"die_tune": True})
    sid, version = r.session(0)
    with pytest.raises(Exception, match="worker died"):
        r.service.tune(sid, version, max_configs=8)


def test_tuning_devices_picks_the_model_and_the_idle() -> None:
    h200 = Device(name=H200, backend="cuda", arch="sm_90")
    other_arch = Device(name=H200, backend="cuda", arch="sm_100")
    devices = [(0, h200), (1, Device(name=H100, backend="cuda", arch="sm_90")), (2, h200), (3, other_arch),
               (4, h200)]
    assert tuning_devices(h200, 2, devices, lambda i: 0) == [2, 0, 4]
    assert tuning_devices(h200, 2, devices, lambda i: 1 if i in (0, 2) else 0) == [2, 4]  # own device even busy


def test_a_plan_sizes_the_batch_by_devices_and_cores(monkeypatch) -> None:
    from peak_mcp.loop.tuning import search as tuning

    monkeypatch.setattr(tuning.os, "sched_getaffinity", lambda _pid: set(range(16)))
    assert [tuning.batch_size(n, 2) for n in (64, 256, 4096)] == [8, 8, 8]  # 8 each: two compiles share 16 cores
    monkeypatch.setattr(tuning.os, "sched_getaffinity", lambda _pid: set(range(128)))
    assert [tuning.batch_size(4096, d) for d in (1, 2, 4, 8)] == [32, 32, 32, 16]
    assert tuning.batch_size(512, 2) == 32 and tuning.batch_size(256, 2) == 16  # still 8 rounds in a search
    fan = FanOut(lambda d, b, w, p: [], lambda: [0, 1], per_device=lambda lanes: tuning.batch_size(4096, lanes),
                 cores=16)
    assert fan.plan() == 64 and fan.compile_workers(2) == 8 and fan.compile_workers(1) is None
    seen: list[tuple[int, int, int]] = []
    fan = FanOut(lambda d, b, w, p: seen.append((d, len(b), w)) or [], lambda: [3, 5, 7], per_device=lambda _: 8,
                 cores=12)
    assert fan.plan() == 24
    fan.measure([Config(params={"A": i}) for i in range(10)])
    # chunks of ceil(10 / 3); each device takes the next as it comes free, so one may take two
    assert sorted(n for _, n, _ in seen) == [2, 4, 4] and {w for *_, w in seen} == {4}
    assert {d for d, *_ in seen} <= {3, 5, 7}
    assert fan.plan_all(96) == 96 and fan.chunk_size(96, 3) == 32 and fan.chunk_size(96, 2) == 24
    assert fan.chunk_size(96, 1) == 32 and fan.chunk_size(100, 4) == 25 and fan.chunk_size(24, 3) == 8


def test_a_session_starts_its_idle_twins_workers_ahead_of_a_tune(rig) -> None:
    """Issue 35: a tune's helper devices started their workers inside its first batch (4 s of it on H200s). A
    session now starts them in the background, without queueing on them (placement and tuning read the queues)."""
    r = rig([H200, H200, H100])
    sid, version = r.session(0)
    deadline = time.monotonic() + 30
    while ("cuda", 1) not in r.pool._workers and time.monotonic() < deadline:
        time.sleep(0.05)
    assert r.pool._workers[("cuda", 1)].alive()
    assert ("cuda", 2) not in r.pool._workers  # another model: no tune of this session would use it
    assert r.pool.queue_length("cuda", 1) == 0
    report = r.service.tune(sid, version, max_configs=16)
    assert report.devices == [0, 1] and report.tried == 16


def _generality_jobs(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [j for j in jobs if j["type"] == "generality"]


def test_a_submission_checks_its_other_sizes_on_an_idle_twin_while_its_own_device_times_it(rig) -> None:
    """Issue 35: a submission's phases ran one after another on the session's device (timing, then the other sizes
    and the sanitizer). Where a device of the same model is idle, the other sizes run there at the same time; the
    verdict waits for both, and the timeline shows the twin's steps apart."""
    r = rig([H200, H200, H100], d0={"eval_s": 1.0}, d1={"general_s": 0.5})
    sid = r.service.start_session("matmul", "cuda", "f32", SIZES, device=0).session_id
    r.log.write_text("")
    report = r.service.submit_kernel(sid, TUNED)
    assert report.status == "benchmarked" and report.generality["passed"] is True, report.message
    jobs = r.jobs()
    (general,) = _generality_jobs(jobs)
    timed = next(j for j in jobs if j["type"] == "evaluate" and "benchmark" in (j["steps"] or []))
    assert general["device"] == 1 and timed["device"] == 0
    assert general["start"] < timed["end"]  # at the same time, not after
    assert report.generality["sizes_checked"]  # the twin's verdict is the version's
    timeline = r.service.store.version(sid, report.version).timeline
    assert "generality (beside)" in timeline.phases, timeline.phases
    assert any(line == "[beside] checks on device 1" for _, line in timeline.steps)
    assert any(line.startswith("[beside] generality") for _, line in timeline.steps)


def test_without_an_idle_twin_the_other_sizes_follow_timing_on_the_sessions_device(rig) -> None:
    r = rig([H200, H100])
    sid = r.service.start_session("matmul", "cuda", "f32", SIZES, device=0).session_id
    r.log.write_text("")
    report = r.service.submit_kernel(sid, TUNED)
    assert report.status == "benchmarked"
    jobs = r.jobs()
    (general,) = _generality_jobs(jobs)
    timed = next(j for j in jobs if j["type"] == "evaluate" and "benchmark" in (j["steps"] or []))
    assert general["device"] == 0 and general["start"] >= timed["end"]


def test_a_version_wrong_at_the_sessions_sizes_starts_nothing_on_a_twin(rig) -> None:
    """The twin's checks start with the version's timing, which only a version that passed at the session's sizes
    reaches: a wrong one leaves the twins idle (the review: two wrong submissions held two twins, and another
    session's submission waited 6 s behind them)."""
    r = rig([H200, H200, H200], d0={"wrong": True}, d1={"general_s": 3.0}, d2={"general_s": 3.0})
    sid = r.service.start_session("matmul", "cuda", "f32", SIZES, device=0).session_id
    r.log.write_text("")
    for _ in range(2):
        report = r.service.submit_kernel(sid, TUNED)
        assert report.status == "failed" and not report.generality, report.message
    assert r.pool.queue_length("cuda", 1) == r.pool.queue_length("cuda", 2) == 0
    assert not _generality_jobs(r.jobs())


def test_a_twin_whose_worker_dies_is_checked_again_on_the_sessions_device_and_set_aside(rig) -> None:
    """The review: a twin whose worker died during the checks failed every version sent to it ("worker_died ... the
    kernel probably crashed"), a device fault blamed on the kernel. Now the session's own device checks again and
    judges, and the twin is not taken again."""
    r = rig([H200, H200], d0={"eval_s": 0.3}, d1={"die_general": True})
    sid = r.service.start_session("matmul", "cuda", "f32", SIZES, device=0).session_id  # v0 meets the sick twin
    first = r.service.store.version(sid, 0)
    assert first.status == "benchmarked" and first.generality.passed is True, first.message
    steps = [line for _, line in first.timeline.steps]
    assert any("device 1 gave" in line and "checking again on the session's device" in line for line in steps)
    r.log.write_text("")
    again = r.service.submit_kernel(sid, TUNED)
    assert again.status == "benchmarked" and again.generality["passed"] is True
    assert [j["device"] for j in _generality_jobs(r.jobs())] == [0]  # set aside: not tried again
    assert r.pool.restarts <= 1  # the twin's worker died once, not at every submission


def test_two_sessions_never_hold_one_twin_and_a_twin_is_nobodys_home_first(rig) -> None:
    """The review: the lowest idle index won, so a session took another session's own device while a device no
    session lives on sat idle, and two submissions at once could take the same twin."""
    from peak_mcp.loop.devices import TwinLedger

    ledger = TwinLedger()
    from collections import Counter
    homes = Counter({0: 1, 1: 1})
    first = ledger.take("cuda", [1, 2], homes)
    assert first == 2  # device 1 is another session's home
    assert ledger.take("cuda", [1, 2], homes) == 1  # 2 is held
    assert ledger.take("cuda", [1, 2], homes) is None
    ledger.release("cuda", 2)
    ledger.set_aside("cuda", 2)
    assert ledger.take("cuda", [2], homes) is None
