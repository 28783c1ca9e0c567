"""Problem hosts and device memory (peak_mcp/runner: pool.MAX_HOSTS_PER_DEVICE, problem_host's notes,
device_memory): through a real pool, worker and problem hosts on lavapipe.

- Problem hosts per device are bounded: after sessions on more problem files than the bound, only the most recently
  used hosts live, the others' processes are gone, and an evicted file's next job starts its host again.
- A problem host's steps each say what they do: a trial whose file calls together take longer than the inactivity
  limit, each shorter, is no hang.
- A problem file's code that runs out of device memory is the device's failure (kind device_memory), not the
  kernel's and not the file's.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from peak_mcp.core.launch import parse_annotation
from peak_mcp.problems.code import SHIPPED_DIR
from peak_mcp.problems.declared import prelude
from peak_mcp.problems.registry import describe_in_subprocess
from peak_mcp.runner.messages import EvaluateJob
from peak_mcp.runner.pool import MAX_HOSTS_PER_DEVICE, DevicePool, JobFailed
from peak_mcp.runner.replies import EvaluateResult
from tests.conftest import has_device

pytestmark = pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")
SIZES = {"ROWS": 64, "COLS": 32}
KERNEL = prelude("hlsl", "f32") + (SHIPPED_DIR / "row_sum.hlsl").read_text()  # the naive kernel as a session has it


def _file(folder: Path, name: str, body: str = "") -> Any:
    """A copy of the shipped row_sum problem under another name (so a problem host runs it), with `body` added."""
    folder.mkdir(parents=True, exist_ok=True)
    source = (SHIPPED_DIR / "row_sum.py").read_text().replace('NAME = "row_sum"', f'NAME = "{name}"')
    for naive in ("row_sum.hlsl", "row_sum.cu"):
        (folder / naive).write_text((SHIPPED_DIR / naive).read_text())
    path = folder / f"{name}.py"
    path.write_text(source + textwrap.dedent(body))
    return describe_in_subprocess(path, timeout_s=120)


def _job(declaration: Any, trials: int = 1, seed: int = 3) -> EvaluateJob:
    spec = parse_annotation(KERNEL, needs=("entry", "groups"), symbols=("ROWS", "COLS"))
    return EvaluateJob(problem=declaration.name, declaration=declaration, dtype="f32", sizes=SIZES, source=KERNEL,
                       spec=spec, steps=["compile", "validate"], trials=trials, seed=seed)


def _passed(result: Any) -> bool:
    return isinstance(result, EvaluateResult) and result.validation is not None and result.validation.passed


def test_problem_hosts_per_device_are_bounded_least_recently_used_first(tmp_path: Path) -> None:
    names = [f"rs_bound_{i}" for i in range(MAX_HOSTS_PER_DEVICE + 2)]
    declarations = [_file(tmp_path / name, name) for name in names]
    pool = DevicePool()
    started: dict[str, Any] = {}  # file -> the host process that ran its first job
    try:
        for declaration in declarations:
            assert _passed(pool.run("hlsl", 0, _job(declaration), inactivity_s=120, total_s=600))
            hosts = pool._workers[("hlsl", 0)].hosts
            started[declaration.name] = hosts[(declaration.path, declaration.sha256)]
            assert len(hosts) <= MAX_HOSTS_PER_DEVICE
        live = {name for name, host in started.items() if host.alive()}
        assert live == set(names[-MAX_HOSTS_PER_DEVICE:])  # the least recently used were stopped, processes gone
        # the oldest session's next job starts its host again, and its worker link with it
        assert _passed(pool.run("hlsl", 0, _job(declarations[0]), inactivity_s=120, total_s=600))
        hosts = pool._workers[("hlsl", 0)].hosts
        assert len(hosts) == MAX_HOSTS_PER_DEVICE and (declarations[0].path, declarations[0].sha256) in hosts
        assert not started[names[-MAX_HOSTS_PER_DEVICE]].alive()  # now the least recently used
    finally:
        pool.close()
    assert not any(host.alive() for host in started.values())


SLOW = """

import time

def generate(name, shape, rng):
    time.sleep(STEP_S)
    return rng.standard_normal(shape)

def reference(x, *, xp):
    time.sleep(STEP_S)
    return x.sum(axis=1)
"""


def test_a_problem_hosts_notes_keep_a_long_trial_alive(tmp_path: Path) -> None:
    """Each of the file's calls (generate, the float64 and the float32 reference, the host's spot check) sleeps 1.5
    s: a trial takes over 4 s of the file's code, past a 3 s inactivity limit, and passes because the host says when
    each call starts and ends."""
    declaration = _file(tmp_path, "rs_slow", SLOW.replace("STEP_S", "1.5"))
    pool = DevicePool()
    try:
        # the worker's start and its first compile outside the measured job
        assert _passed(pool.run("hlsl", 0, _job(declaration), inactivity_s=120, total_s=600))
        notes: list[str] = []
        # another seed: the worker keeps the first job's inputs and reference (reference_cache), not this one's
        result = pool.run("hlsl", 0, _job(declaration, seed=4), inactivity_s=3, total_s=600, progress=notes.append)
    finally:
        pool.close()
    assert _passed(result), result
    assert any(note.startswith("reference: received") for note in notes), notes
    assert all("from the problem file" in note for note in notes if note.startswith(("reference", "generate"))
               and "the server takes it from here" not in note)  # the server's own step after an answer


OUT_OF_MEMORY = """

class OutOfMemoryError(RuntimeError):
    '''What torch (torch.OutOfMemoryError) and cupy raise, as the file's code would meet it.'''

def reference(x, *, xp):
    if x.shape[0] < 64:  # describe's smoke test fits
        return x.sum(axis=1)
    raise OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB")
"""


def test_a_problem_file_out_of_device_memory_is_the_devices_failure(tmp_path: Path) -> None:
    declaration = _file(tmp_path, "rs_oom", OUT_OF_MEMORY)
    pool = DevicePool()
    try:
        with pytest.raises(JobFailed) as failed:
            pool.run("hlsl", 0, _job(declaration), inactivity_s=120, total_s=600)
        # the host lives on (the file is fine at sizes that fit): the next job reaches it again
        with pytest.raises(JobFailed) as again:
            pool.run("hlsl", 0, _job(declaration), inactivity_s=120, total_s=600)
    finally:
        pool.close()
    for exc in (failed.value, again.value):
        assert exc.kind == "device_memory", exc
        assert "ran out of memory" in exc.message and "not because of the kernel" in exc.message
        assert "Tried to allocate 16.00 GiB" in exc.message


ONCE_OUT_OF_MEMORY = """

class OutOfMemoryError(RuntimeError):
    '''What torch and cupy raise.'''

_calls = [0]

def reference(x, *, xp):
    if x.shape[0] >= 64:  # the job's sizes, not describe's smoke test
        _calls[0] += 1
        if _calls[0] == 3:  # the second trial's first reference: the first trial's set is kept by then
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB")
    return x.sum(axis=1)
"""


def test_a_job_out_of_memory_with_kept_sets_runs_again_without_them(tmp_path: Path) -> None:
    """The hostile review: the input sets kept between submissions could make a later job run short of memory and
    fail as the validator's fault. Such a job now runs once more without them."""
    declaration = _file(tmp_path, "rs_once", ONCE_OUT_OF_MEMORY)
    pool = DevicePool()
    notes: list[str] = []
    try:
        result = pool.run("hlsl", 0, _job(declaration, trials=3, seed=11), inactivity_s=120, total_s=600,
                          progress=notes.append)
    finally:
        pool.close()
    assert _passed(result), result
    assert any("running again without them" in note for note in notes), notes


CYCLE = """

class _Node:
    pass

def reference(x, *, xp):
    a, b = _Node(), _Node()
    a.other, b.other = b, a  # a reference cycle holding 16 MiB: freed only by a collection
    a.held = xp.ones(1 << 21)
    return x.sum(axis=1)
"""


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_files_reference_cycles_are_collected_between_calls(tmp_path: Path) -> None:
    """Review 43 (F2): the host collected only after a failed call, so arrays a file's reference left in a cycle
    piled up (40 calls of 32 MiB: 1.3 GB). It collects before every answer, and freezes what survives, so the next
    collection walks only what the next call made."""
    declaration = _file(tmp_path, "rs_cycle", CYCLE)
    pool = DevicePool()
    try:
        assert _passed(pool.run("hlsl", 0, _job(declaration), inactivity_s=120, total_s=600))
        host = pool._workers[("hlsl", 0)].hosts[(declaration.path, declaration.sha256)]
        before = _rss_mib(host.process.pid)
        for seed in range(4, 24):  # new seeds: nothing kept between jobs, every trial calls the reference
            assert _passed(pool.run("hlsl", 0, _job(declaration, seed=seed), inactivity_s=120, total_s=600))
        grown = _rss_mib(host.process.pid) - before
    finally:
        pool.close()
    assert grown < 150, f"the problem host grew by {grown:.0f} MiB over 20 jobs of 16 MiB cycles each"
