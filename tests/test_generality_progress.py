"""Generality reports progress once per launch at every sampled size, as validation at the session's sizes does: a
correct kernel that is slow at a large sampled size (printf from every thread at M=4101 ran past 30 s on the H100)
is not taken for a hung one. Runs on lavapipe."""

from __future__ import annotations

import pytest

from peak_mcp.backends import hlsl
from peak_mcp.backends.registry import launch_spec
from peak_mcp.problems.matmul import Matmul
from peak_mcp.runner.jobs import generality
from peak_mcp.runner.messages import GeneralityJob
from tests.conftest import has_device, skip_reason

pytestmark = pytest.mark.vulkan


@pytest.mark.skipif(not has_device("hlsl"), reason=skip_reason("hlsl"))
def test_each_sampled_size_reports_each_launch() -> None:
    source = Matmul().naive_kernel("hlsl", "f32")
    sizes_list = [{"M": 9, "N": 7, "K": 5}, {"M": 33, "N": 19, "K": 65}]
    job = GeneralityJob(problem="matmul", dtype="f32", source=source, spec=launch_spec(source, "hlsl", Matmul.symbols),
                        sizes_list=sizes_list, seed=1)
    notes: list[str] = []
    executor = hlsl.open_executor(0)
    try:
        result = generality(executor, job, notes.append)
    finally:
        executor.close()
    assert result.generality is not None and result.generality.passed, result
    for label in ("M=9 N=7 K=5", "M=33 N=19 K=65"):
        launches = [n for n in notes if n.startswith(f"generality at {label}: ")]
        assert any("trial 1/1" in n for n in launches) and any("repeat launch" in n for n in launches), notes
