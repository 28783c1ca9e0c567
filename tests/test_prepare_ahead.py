"""Issue 35: a session started without a first version has its checks prepared in the background (the worker's
priming, the input sets and references of its validation and of generality's sizes, the sanitizer's targets), so
the first submission finds them; between submissions, the fresh sets of the next validation on fresh inputs are
drawn ahead too. What the submissions check must not change: a wrong kernel still fails, on the
same kept sets, and a small output still gets one fresh trial, each fresh set used once."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import numpy as np
import pytest

from peak_mcp.backends.base import Compiled
from peak_mcp.backends.registry import launch_spec
from peak_mcp.core.config import Settings
from peak_mcp.evaluation.generality import sample_sizes
from peak_mcp.evaluation.reference_cache import KEPT, SPARE, fresh_trial
from peak_mcp.evaluation.steps import prepare, validate
from peak_mcp.runner import problem_link
from peak_mcp.runner.messages import JOB, PrepareJob
from peak_mcp.runner.pool import DevicePool, DeviceQueues, JobFailed
from peak_mcp.runner.problem_link import RemoteCode
from tests.test_benchmark_audit import PROBLEM, SIZES, HostAsDevice, _honest
from tests.test_define_problem import KERNEL, NEGATE, VULKAN, call


def test_the_prepare_job_is_a_typed_job_and_refuses_unknown_fields() -> None:
    job = JOB.validate_python({"type": "prepare", "problem": "matmul", "dtype": "f32",
                               "sizes": {"M": 64, "N": 64, "K": 64}, "sizes_list": [{"M": 5, "N": 7, "K": 3}]})
    assert isinstance(job, PrepareJob) and job.trials == 3 and not job.sanitizer_standby
    with pytest.raises(ValueError):
        JOB.validate_python({"type": "prepare", "problem": "matmul", "dtype": "f32", "sizes": {}, "source": "x"})


def test_a_waiting_job_is_told_what_kind_of_job_it_waits_behind() -> None:
    queues = DeviceQueues()
    key = ("cuda", 0)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with queues.turn(key, None, "prepare"):
            holding.set()
            release.wait(5)

    thread = threading.Thread(target=hold)
    thread.start()
    holding.wait(5)
    heard: list[str] = []
    threading.Timer(0.5, release.set).start()
    with queues.turn(key, None, "evaluate", heard.append):
        pass
    thread.join()
    assert len(heard) == 1 and "input sets and references ahead" in heard[0], heard
    with queues.turn(key, None, "evaluate", heard.append):  # an idle device: nothing said
        pass
    assert len(heard) == 1


@pytest.fixture
def settings(settings: Settings) -> Settings:
    settings.prepare_ahead = "always"  # lavapipe is a CPU device: "gpu" would leave it out
    return settings


async def _negate_session(client: Any) -> dict[str, Any]:
    """A session of the test problem negate at N=1000 on lavapipe (no naive kernel: it starts without a version)."""
    await call(client, "define_problem", {"source": NEGATE})
    return await call(client, "start_session", {"problem": "negate", "backend": "hlsl", "sizes": {"N": 1000}})


@VULKAN
@pytest.mark.anyio
async def test_the_first_submission_finds_its_sets_prepared_and_still_judges_the_kernel(make_client) -> None:
    async with make_client() as (client, service):
        session = await _negate_session(client)
        sid = session["session_id"]
        assert "the server prepares this session's checks" in session["brief"], session["brief"]
        service.pipeline.preparer.latest[sid].join(120)
        first = await call(client, "submit_kernel", {"session_id": sid, "source": KERNEL.replace("BODY", "-x[id.x]")})
        assert first["status"] == "benchmarked", first["message"]
        steps = [line for _, line in service.store.version(sid, first["version"]).timeline.steps]
        # trials 1 and 3 were drawn and kept by the session's prepare job; trial 2 is fresh (a small output): drawn
        # ahead by the same job, never kept, and used once
        assert len({line for line in steps if "kept from an earlier submission" in line}) == 2, steps
        assert any(line.startswith("validate trial 2/3") and "drawn ahead" in line for line in steps), steps
        assert not any(line.startswith("validate") and "from the problem file" in line for line in steps), steps
        wrong = await call(client, "submit_kernel", {"session_id": sid, "source": KERNEL.replace("BODY", "x[id.x]")})
        assert wrong["failure"] == "wrong_result"


@VULKAN
@pytest.mark.anyio
async def test_a_session_with_a_first_version_or_the_setting_off_is_not_prepared(make_client, settings) -> None:
    async with make_client() as (client, service):
        await call(client, "define_problem", {"source": NEGATE})
        settings.prepare_ahead = "never"
        session = await call(client, "start_session", {"problem": "negate", "backend": "hlsl", "sizes": {"N": 64}})
        assert session["session_id"] not in service.pipeline.preparer.latest
        assert "prepares this session's checks" not in session["brief"]
        settings.prepare_ahead = "gpu"  # lavapipe is no GPU
        session = await call(client, "start_session", {"problem": "negate", "backend": "hlsl", "sizes": {"N": 64}})
        assert session["session_id"] not in service.pipeline.preparer.latest


class _Host(HostAsDevice):
    """The host executor of test_benchmark_audit with plain numpy buffers: its sets are kept (numpy's budget)."""

    def __init__(self) -> None:
        super().__init__()
        self.xp = np


def _validate_fresh(kernel: Any, lines: list[str]) -> dict[str, Any]:
    source = PROBLEM.naive_kernel("cuda", "f32")
    compiled = Compiled(handle=kernel, spec=launch_spec(source, "cuda", PROBLEM.symbols))
    trials = 2 if PROBLEM.stress_ranges() else 1
    validated = validate(_Host(), compiled, PROBLEM, "f32", SIZES, trials=trials, seed=time.time_ns() % 2**31,
                         progress=lines.append, sets=1, keep=False, spot_check=False, spare=True, owner=1)
    validated.close()
    return validated.verdict.model_dump()


def test_fresh_sets_drawn_ahead_are_used_once_and_still_judge_the_kernel() -> None:
    SPARE.clear()
    made = prepare(_Host(), PROBLEM, "f32", SIZES, trials=3, seed=1, progress=lambda _: None, keep=False,
                   spare_revalidation=True)
    assert made == (2 if PROBLEM.stress_ranges() else 1) == len(SPARE)
    lines: list[str] = []
    assert _validate_fresh(_honest, lines)["passed"]
    assert any("drawn ahead" in line for line in lines) and len(SPARE) == 0  # taken, and forgotten
    lines.clear()
    assert _validate_fresh(_honest, lines)["passed"]  # none left: drawn in the validation itself
    assert not any("drawn ahead" in line for line in lines)
    prepare(_Host(), PROBLEM, "f32", SIZES, trials=3, seed=1, progress=lambda _: None, keep=False,
            spare_revalidation=True)

    def wrong(a: np.ndarray, b: np.ndarray, sizes: dict[str, int], launch: int) -> np.ndarray:
        out = _honest(a, b, sizes, launch)
        out[1, 2] += 1.0
        return out

    verdict = _validate_fresh(wrong, lines)
    assert not verdict["passed"] and verdict["check"] == "wrong_result", verdict
    # the kept sets of a session's validation are not spare ones: a prepare without spare draws none
    SPARE.clear()
    prepare(_Host(), PROBLEM, "f32", SIZES, trials=3, seed=1, progress=lambda _: None)
    assert len(SPARE) == 0


def test_the_fresh_trial_of_a_small_output_takes_a_set_drawn_ahead_once() -> None:
    SPARE.clear()
    KEPT.clear()
    seed = 11
    assert fresh_trial(PROBLEM, "f32", SIZES, 3) == 1  # a small output: trial 2 of 3 is drawn fresh
    made = prepare(_Host(), PROBLEM, "f32", SIZES, trials=3, seed=seed, progress=lambda _: None, spare_fresh=True)
    assert made == 3 and len(SPARE) == 1 and len(KEPT) == 2  # trials 1 and 3 kept; one fresh set for trial 2
    again = prepare(_Host(), PROBLEM, "f32", SIZES, trials=3, seed=seed, progress=lambda _: None, spare_fresh=True)
    assert again == 0  # nothing is drawn twice

    def run(kernel: Any) -> tuple[dict[str, Any], list[str]]:
        lines: list[str] = []
        source = PROBLEM.naive_kernel("cuda", "f32")
        compiled = Compiled(handle=kernel, spec=launch_spec(source, "cuda", PROBLEM.symbols))
        validated = validate(_Host(), compiled, PROBLEM, "f32", SIZES, trials=3, seed=seed, progress=lines.append)
        validated.close()
        return validated.verdict.model_dump(), lines

    verdict, lines = run(_honest)
    assert verdict["passed"] and len(SPARE) == 0
    assert any(line.startswith("validate trial 2/3") and "drawn ahead" in line for line in lines), lines
    assert sum("kept from an earlier submission" in line for line in lines) == 2
    verdict, lines = run(_honest)  # none left: the fresh trial draws its own
    assert verdict["passed"] and not any("drawn ahead" in line for line in lines)
    KEPT.clear()


@VULKAN
@pytest.mark.anyio
async def test_the_size_drawn_for_the_next_check_is_the_one_prepared_and_then_forgotten(make_client) -> None:
    async with make_client() as (client, service):
        session = await _negate_session(client)
        sid = session["session_id"]
        ctx = service.ctx
        seed = ctx.next_draw(sid)
        assert ctx.next_draw(sid) == seed  # kept until a check takes it
        expected = sample_sizes(ctx.problem("negate"), {"N": 1000}, [], draw=random.Random(seed))
        service.pipeline.preparer.latest[sid].join(120)
        first = await call(client, "submit_kernel", {"session_id": sid, "source": KERNEL.replace("BODY", "-x[id.x]")})
        assert first["status"] == "benchmarked", first["message"]
        checked = service.store.version(sid, first["version"]).generality.sizes_checked
        assert checked == expected, (checked, expected)
        service.pipeline.preparer.latest[sid].join(120)  # the job after the submission drew the next seed
        assert ctx.take_draw(sid) != seed


def test_a_spare_set_belongs_to_its_session() -> None:
    SPARE.clear()
    prepare(_Host(), PROBLEM, "f32", SIZES, trials=3, seed=21, progress=lambda _: None, keep=False,
            spare_revalidation=True)
    mine = SPARE.key(PROBLEM, np, "f32", SIZES, False, owner=21)
    assert SPARE.count(mine) == 1
    assert SPARE.take(SPARE.key(PROBLEM, np, "f32", SIZES, False, owner=22), np) is None  # another session's
    inputs, _ = SPARE.take(mine, np)
    assert all(isinstance(a, np.ndarray) for a in inputs.values()) and SPARE.count(mine) == 0
    SPARE.clear()


def test_a_closed_pool_starts_no_worker_for_a_job_that_waited() -> None:
    pool = DevicePool()
    pool.close()
    with pytest.raises(JobFailed) as failed:
        pool.run("hlsl", 0, object(), inactivity_s=1, total_s=1)
    assert failed.value.kind == "cancelled" and not pool._workers


def test_the_workers_own_work_on_an_answer_is_said_while_it_lasts_and_only_then() -> None:
    """The worker's own work on a large answer is said every second (a 12 GiB reference outlasted the inactivity
    limit), only inside that work: no line is said for it after, when a kernel may run and hang."""
    heard: list[str] = []
    job_progress = heard.append
    code = RemoteCode.__new__(RemoteCode)
    code.progress = lambda: job_progress
    with code.server_work("the server folds the reference's bound"):
        time.sleep(2.5 * problem_link.BEAT_S)
    said = len(heard)
    assert said >= 3 and set(heard) == {"the server folds the reference's bound"}
    time.sleep(2.5 * problem_link.BEAT_S)
    assert len(heard) == said  # nothing after the work
    job_progress = None  # no job in flight: nothing said, the body still runs
    with code.server_work("x"):
        pass
    assert len(heard) == said
