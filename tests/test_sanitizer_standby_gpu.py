"""compute-sanitizer's targets on standby, on a real GPU: a run that takes them finds what a fresh run finds, and a
clean kernel after a faulting one is clean (each target serves one job). Skipped where no CUDA device is present."""

from __future__ import annotations

import pytest

from peak_mcp.backends.registry import launch_spec
from peak_mcp.backends.toolkit import find_tool
from peak_mcp.runner import sanitizer
from peak_mcp.runner.messages import LaunchTarget
from tests.conftest import EXAMPLES, has_device, skip_reason

pytestmark = [pytest.mark.gpu]
if not has_device("cuda"):
    pytestmark.append(pytest.mark.skip(reason=f"no CUDA GPU: {skip_reason('cuda')}"))
elif find_tool("compute-sanitizer") is None:
    pytestmark.append(pytest.mark.skip(reason="no compute-sanitizer"))

SIZES = {"M": 67, "N": 45, "K": 33}
CLEAN = (EXAMPLES / "cuda" / "naive.cu").read_text()
READS_BEFORE_A = CLEAN.replace("acc += A[", "acc += (row == 0 && col == 0 && k == 0 ? A[-64] : 0.0f) + A[")


def _target(source: str) -> LaunchTarget:
    return LaunchTarget(source=source, spec=launch_spec(source, "cuda", ("M", "N", "K")), problem="matmul",
                        dtype="f32", sizes=SIZES, device=0)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    sanitizer.Standby.discard()
    yield
    sanitizer.Standby.discard()


def test_standby_targets_find_a_fault_and_then_judge_a_clean_kernel_clean() -> None:
    assert "A[-64]" in READS_BEFORE_A
    first = sanitizer.start(_target(CLEAN))
    assert isinstance(first, sanitizer.Running) and not first.warm
    assert first.finish().passed
    assert sanitizer.Standby.waiting is not None and sanitizer.Standby.waiting.alive()

    faulty = sanitizer.start(_target(READS_BEFORE_A))
    assert faulty.warm
    report = faulty.finish()
    assert not report.passed and "sanitizer_memcheck" in [f.check for f in report.failures], report

    clean = sanitizer.start(_target(CLEAN))
    assert clean.warm
    report = clean.finish()
    assert report.passed and sorted(report.clean) == sorted(sanitizer.TOOLS), report
