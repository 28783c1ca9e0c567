"""tools/timelines.py --steps: a heartbeat repeats a long step's line about once a second, so the listing merges
consecutive lines with the same label into one step (their seconds summed, their count shown) and ranks the real
steps instead of a heartbeat's one-second slices."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from peak_mcp.store.database import Store
from peak_mcp.store.records import Timeline
from tests.conftest import ROOT

PREPARING = "preparing the checks for conv2d f16 (once per worker)"


def _tool():
    spec = importlib.util.spec_from_file_location("timelines", ROOT / "tools" / "timelines.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _steps() -> list[tuple[float, str]]:
    # admit 0.5 s, compile 3 s, ten heartbeat lines of 1 s, validate 2 s, preparing again (once, 0.5 s) to the end
    heartbeat = [(3.5 + i, PREPARING) for i in range(10)]
    return [(0.0, "admit"), (0.5, "compile"), *heartbeat, (13.5, "validate trial 1/3"), (15.5, PREPARING)]


def test_repeated_lines_are_merged_into_one_step() -> None:
    timeline = Timeline(total_s=16.0, steps=_steps())
    assert _tool().longest_steps(timeline, 3) == [(10.0, 10, PREPARING), (3.0, 1, "compile"),
                                                  (2.0, 1, "validate trial 1/3")]
    # only consecutive lines merge: the label's later line after another step stays its own step
    assert _tool().longest_steps(timeline, 10)[-2:] == [(0.5, 1, PREPARING), (0.5, 1, "admit")]
    assert _tool().longest_steps(Timeline(total_s=1.0), 3) == []


def test_the_listing_shows_the_merged_step_and_its_count(tmp_path: Path) -> None:
    store = Store(tmp_path / "peak.sqlite3")
    sid = store.create_session(problem="conv2d", backend="cuda", dtype="f16", sizes={"N": 8}, device="d",
                               device_index=0, label=None)
    store.add_version(sid, parent=None, origin="submit", transformation=None, source="x", status="benchmarked",
                      timeline={"total_s": 16.0, "phases": {"other": 16.0}, "steps": _steps()})
    store.close()
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "timelines.py"), "--data-dir", str(tmp_path),
                           "--steps", "2"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    listed = done.stdout.split("longest steps of 14 recorded:\n")[1].splitlines()
    assert listed == [f"    10.00 s  {PREPARING}  x10", "     3.00 s  compile"]
