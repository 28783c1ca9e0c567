"""Issue 35: a timeline per submission in the record. Each version stores where its seconds went, by phase, from the
progress lines the worker sends (loop/timeline.py); the phases add up to the submission's time."""

from __future__ import annotations

import subprocess
import sys

import pytest

from peak_mcp.loop.timeline import Recorder, phase_of
from tests.conftest import EXAMPLES, ROOT, has_device, skip_reason


def test_progress_lines_fall_into_their_phases() -> None:
    assert phase_of("compile") == "compile" and phase_of("validate trial 2/3 (stress ranges)") == "validate"
    assert phase_of("validate trial 1/3: inputs and reference from the problem file /p.py") == "reference"
    assert phase_of("benchmark: warm-up") == "benchmark" and phase_of("yardsticks: torch.compile") == "yardsticks"
    assert phase_of("generality at M=70, N=45, K=33") == "generality"
    assert phase_of("compute-sanitizer memcheck at M=64") == "sanitizer"
    heard: list[str] = []
    recorder = Recorder(heard.append)
    for line in ("compile", "validate trial 1/2", "benchmark: warm-up"):
        recorder(line)
    timeline = recorder.timeline()
    assert heard == ["compile", "validate trial 1/2", "benchmark: warm-up"]  # passed on, unchanged
    assert set(timeline.phases) == {"admit", "compile", "validate", "benchmark"}
    assert abs(sum(timeline.phases.values()) - timeline.total_s) < 0.01
    assert [line for _, line in timeline.steps] == ["admit", *heard]


def test_a_long_submission_keeps_its_end_and_merges_a_heartbeats_repeats() -> None:
    from peak_mcp.loop.timeline import MAX_STEPS, TAIL_STEPS, kept_steps

    lines = [(0.5 * i, f"generality at N={i}") for i in range(100)]
    beats = [(50.0 + 0.1 * i, "sanitizer: running") for i in range(30)]  # one step said 30 times
    kept = kept_steps([(0.0, "admit"), *lines, *beats, (60.0, "verdict")])
    assert len(kept) == MAX_STEPS
    assert kept[0] == (0.0, "admit") and kept[-1] == (60.0, "verdict")
    assert [line for _, line in kept].count("sanitizer: running") == 1 and kept[-2] == (50.0, "sanitizer: running")
    marker = next(i for i, (_, line) in enumerate(kept) if line.endswith("steps not kept)"))
    assert marker == MAX_STEPS - TAIL_STEPS - 1 and kept[marker][1] == "(40 steps not kept)"
    # the left-out steps are not charged to the line before them: the marker starts where they did
    assert kept[marker][0] == kept[marker - 1][0] + 0.5
    assert kept_steps([(0.0, "admit"), (1.0, "compile")]) == [(0.0, "admit"), (1.0, "compile")]


@pytest.mark.anyio
@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
async def test_a_submission_records_its_timeline(make_client, settings) -> None:
    async with make_client() as (client, service):
        started = await client.call_tool("start_session", {"backend": "hlsl", "sizes": {"M": 70, "N": 45, "K": 33}})
        sid = started.structured_content["session_id"]
        source = (EXAMPLES / "hlsl" / "naive.hlsl").read_text()
        answer = await client.call_tool("submit_kernel", {"session_id": sid, "source": source})
        assert not answer.is_error, answer.content[0].text
        number = answer.structured_content["version"]
        timeline = service.store.version(sid, number).timeline
        assert timeline is not None and timeline.total_s > 0
        assert {"compile", "validate", "benchmark", "generality"} <= set(timeline.phases), timeline.phases
        assert abs(sum(timeline.phases.values()) - timeline.total_s) < 0.05
        table = subprocess.run([sys.executable, str(ROOT / "tools" / "timelines.py"), "--data-dir",
                                str(settings.data_dir)], capture_output=True, text=True, timeout=60)
        assert table.returncode == 0, table.stderr
        assert f"| {sid} | v{number} |" in table.stdout and "| median |" in table.stdout
