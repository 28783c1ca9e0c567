"""How the server runs compute-sanitizer: four tools at once, reports reduced to the kernel's own lines, a
heartbeat while they run, and a tool that never finishes killed with its target. A stand-in compute-sanitizer
on PATH plays the external tool here (the real one ran on the lent H100; see the GPU suite)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from peak_mcp.core.launch import LaunchSpec
from peak_mcp.runner import sanitizer
from peak_mcp.runner.messages import LaunchTarget

REPORTING = """#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = --log-file ] && log=$2; [ "$1" = --tool ] && tool=$2; shift; done
cat > "$log" <<EOT
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at mm+0x760 in kernel.cu:28
=========     by thread (0,0,0) in block (0,0,0)
=========     Address 0x7f3a9c000000 is out of bounds
=========     Host Frame: /usr/lib/x86_64-linux-gnu/libcuda.so.1 [0x1234]
========= ERROR SUMMARY: 1 error
EOT
[ "$tool" = memcheck ] && exit 86
printf '========= ERROR SUMMARY: 0 errors\\n' > "$log"
exit 0
"""

HANGING = """#!/bin/sh
sleep 300 &
echo $! > "$PEAK_TEST_CHILDREN/$$"
wait
"""

JOB = LaunchTarget(source="", spec=LaunchSpec(entry="k", line=1), problem="matmul", dtype="f32",
                   sizes={"M": 100, "N": 77, "K": 53}, device=0)


@pytest.fixture(autouse=True)
def _no_standby_left() -> None:
    """Targets a run leaves on standby are ended after each test (the stand-in tools differ between tests)."""
    yield
    sanitizer.Standby.discard()


def _install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    tool = tmp_path / "bin" / "compute-sanitizer"
    tool.parent.mkdir()
    tool.write_text(script)
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")


def test_a_reported_error_names_the_tool_and_the_kernel_line_only(tmp_path, monkeypatch) -> None:
    _install(tmp_path, monkeypatch, REPORTING)
    beats: list[str] = []
    report = sanitizer.run(JOB, beats.append)
    assert report.available and report.passed is False and report.unchecked == []
    assert [f.check for f in report.failures] == ["sanitizer_memcheck"]
    message = report.failures[0].message
    assert "kernel.cu:28" in message and "Invalid __global__ write" in message and "out of bounds" in message
    assert "libcuda" not in message and "/usr" not in message and "0x7f3a9c000000" not in message
    assert sorted(report.clean) == ["initcheck", "racecheck", "synccheck"]
    assert beats and "compute-sanitizer at M=100 N=77 K=53" in beats[0]


def test_a_tool_that_never_finishes_is_killed_with_its_children(tmp_path, monkeypatch) -> None:
    children = tmp_path / "children"
    children.mkdir()
    _install(tmp_path, monkeypatch, HANGING)
    monkeypatch.setenv("PEAK_TEST_CHILDREN", str(children))
    monkeypatch.setattr(sanitizer, "TIMEOUT_S", 1.5)
    started = time.monotonic()
    report = sanitizer.run(JOB, None)
    assert time.monotonic() - started < 10
    assert report.passed and {u.tool for u in report.unchecked} == set(sanitizer.TOOLS)  # not clean
    assert report.clean == [] and all("did not finish" in u.message for u in report.unchecked)
    time.sleep(0.2)
    pids = [int(p.read_text()) for p in children.iterdir()]
    assert len(pids) == len(sanitizer.TOOLS)
    for pid in pids:  # the target's stand-in (a child of the tool) is gone too
        status = Path(f"/proc/{pid}/stat")
        assert not status.exists() or status.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_missing_tool_is_reported_with_a_fix(monkeypatch) -> None:
    monkeypatch.setattr(sanitizer, "find_tool", lambda _name: None)
    report = sanitizer.run(JOB, None)
    assert report.available is False and "compute-sanitizer" in (report.what or "") and report.fix


def test_a_hip_kernel_on_nvidia_is_sanitized_and_reported_with_its_own_file(tmp_path, monkeypatch) -> None:
    """HIP source runs on NVIDIA through the CUDA driver, so compute-sanitizer watches it as it does CUDA: the
    backends say so, the target carries the backend (its child opens the HIP executor), and a report naming
    kernel.hip keeps that line."""
    from peak_mcp.backends.cuda import CudaExecutor
    from peak_mcp.backends.hip import HipOnCudaExecutor
    from peak_mcp.backends.hip_amd import HipAmdExecutor
    from peak_mcp.backends.registry import backend_spec

    assert backend_spec("cuda").sanitizer and backend_spec("hip").sanitizer
    assert backend_spec("hlsl").sanitizer  # its own: the Vulkan validation layer (runner/vulkan_sanitizer.py)
    assert CudaExecutor.sanitizer and HipOnCudaExecutor.sanitizer and not HipAmdExecutor.sanitizer
    hip_job = JOB.model_copy(update={"backend": "hip"})
    assert LaunchTarget.model_validate_json(hip_job.model_dump_json()).backend == "hip"
    with pytest.raises(ValueError, match="backend"):
        LaunchTarget.model_validate({**JOB.model_dump(), "backend": "metal"})
    _install(tmp_path, monkeypatch, REPORTING.replace("kernel.cu:28", "kernel.hip:29"))
    report = sanitizer.run(hip_job)
    assert [f.check for f in report.failures] == ["sanitizer_memcheck"]
    assert "kernel.hip:29" in report.failures[0].message and "/usr" not in report.failures[0].message


STANDBY = """#!/bin/sh
# A stand-in tool whose target may wait on stdin for its job (the --standby form), as the real target does.
for a in "$@"; do [ "$a" = --standby ] && standby=1; done
while [ $# -gt 0 ]; do [ "$1" = --log-file ] && log=$2; [ "$1" = --tool ] && tool=$2; shift; done
if [ -n "$standby" ]; then
    read job || exit 0
    [ -f "$job" ] || exit 3
    echo "$tool took $job" >> "$PEAK_TEST_TAKEN"
fi
if [ "$tool" = memcheck ]; then
    printf '========= Invalid __global__ write of size 4 bytes\\n=========     at mm+0x760 in kernel.cu:28\\n' > "$log"
    printf '========= ERROR SUMMARY: 1 error\\n' >> "$log"
    exit 86
fi
printf '========= ERROR SUMMARY: 0 errors\\n' > "$log"
exit 0
"""


@pytest.fixture()
def standby_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    _install(tmp_path, monkeypatch, STANDBY)
    taken = tmp_path / "taken"
    monkeypatch.setenv("PEAK_TEST_TAKEN", str(taken))
    sanitizer.Standby.discard()
    yield taken
    sanitizer.Standby.discard()


def test_the_next_run_takes_targets_started_on_standby_and_still_reports_what_they_found(standby_tool) -> None:
    first = sanitizer.start(JOB)
    assert isinstance(first, sanitizer.Running) and not first.warm  # nothing waited before the first run
    report = first.finish()
    assert [f.check for f in report.failures] == ["sanitizer_memcheck"]
    waiting = sanitizer.Standby.waiting
    assert waiting is not None and waiting.alive() and set(waiting.procs) == set(sanitizer.TOOLS)

    second = sanitizer.start(JOB)
    assert isinstance(second, sanitizer.Running) and second.warm and sanitizer.Standby.waiting is None
    report = second.finish()
    assert [f.check for f in report.failures] == ["sanitizer_memcheck"] and "kernel.cu:28" in report.failures[0].message
    assert sorted(report.clean) == ["initcheck", "racecheck", "synccheck"]
    taken = standby_tool.read_text().splitlines()
    assert len(taken) == len(sanitizer.TOOLS) and all(line.endswith("job.json") for line in taken)
    assert not Path(taken[0].split(" took ")[1]).exists()  # the job's folder goes with the run


def test_a_dead_standby_target_falls_back_to_a_fresh_start(standby_tool) -> None:
    sanitizer.start(JOB).finish()
    waiting = sanitizer.Standby.waiting
    assert waiting is not None
    next(iter(waiting.procs.values())).kill()
    time.sleep(0.2)
    run = sanitizer.start(JOB)
    assert not run.warm
    assert [f.check for f in run.finish().failures] == ["sanitizer_memcheck"]


def test_a_standby_for_another_device_or_backend_is_not_used(standby_tool) -> None:
    for other in ({"device": 1}, {"backend": "hip"}):
        sanitizer.start(JOB).finish()
        run = sanitizer.start(JOB.model_copy(update=other))
        assert not run.warm
        run.abort()


def test_standby_off_starts_nothing_ahead(standby_tool) -> None:
    sanitizer.start(JOB, standby=False).finish()
    assert sanitizer.Standby.waiting is None


def test_a_standby_target_that_dies_after_take_neither_fails_the_run_nor_leaves_targets_waiting(
        standby_tool, monkeypatch: pytest.MonkeyPatch) -> None:
    # take() saw every target alive; one died before hand() wrote its job (a broken pipe): the run starts fresh
    sanitizer.start(JOB).finish()
    waiting = sanitizer.Standby.waiting
    assert waiting is not None
    procs = list(waiting.procs.values())
    procs[1].kill()
    procs[1].wait()
    monkeypatch.setattr(sanitizer.Standby, "alive", lambda self: True)
    run = sanitizer.start(JOB)
    assert isinstance(run, sanitizer.Running) and not run.warm
    assert [f.check for f in run.finish().failures] == ["sanitizer_memcheck"]
    assert all(proc.poll() is not None for proc in procs)  # none of the standby's targets waits on
    assert not Path(waiting.workdir).exists()


def test_a_standby_target_slow_to_die_does_not_make_discard_raise(standby_tool) -> None:
    # A process in uninterruptible sleep outlives SIGKILL for a while: prepare() and take() must not raise for it
    sanitizer.start(JOB).finish()
    waiting = sanitizer.Standby.waiting
    assert waiting is not None
    proc = next(iter(waiting.procs.values()))

    def slow(timeout: float | None = None) -> int:
        raise sanitizer.subprocess.TimeoutExpired(proc.args, timeout or 0)

    proc.wait = slow  # type: ignore[method-assign]
    sanitizer.Standby.discard()
    assert sanitizer.Standby.waiting is None and not Path(waiting.workdir).exists()


def test_standby_off_uses_no_targets_left_from_before_and_ends_them(standby_tool) -> None:
    # the setting turned off while a set waits (PEAK_MCP_SANITIZER_STANDBY=0 on a restarted pool's next job)
    sanitizer.start(JOB).finish()
    waiting = sanitizer.Standby.waiting
    assert waiting is not None
    run = sanitizer.start(JOB, standby=False)
    assert isinstance(run, sanitizer.Running) and not run.warm and sanitizer.Standby.waiting is None
    assert all(proc.poll() is not None for proc in waiting.procs.values())
    run.abort()
