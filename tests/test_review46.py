"""Review of session 46's changes: what a hostile read of them found.

- REFERENCE_IN_FLOAT64 with a host-side reference and device arrays: the float64 reference crosses to the device
  once and the bound reads it as lp too (it was uploaded twice: a second float64 copy of the output on the device).
- tools/timelines.py --steps on a version whose timeline recorded no steps (the field's default) reports it instead
  of failing.
- The timing's early stop leaves the benchmark's final-rotation logic whole (checked over random runs: no defect).
"""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from peak_mcp.core import timing
from peak_mcp.problems.declared import DeclaredProblem
from peak_mcp.problems.loading import problem_code_allowed
from peak_mcp.problems.registry import describe_in_subprocess
from peak_mcp.runner.problem_hosts import start_host
from peak_mcp.runner.problem_link import RemoteCode
from peak_mcp.store.database import Store

ROOT = Path(__file__).resolve().parent.parent
SIZES = {"ROWS": 6, "COLS": 10}
WIDENING = """
import numpy as np

NAME = "rv_widening"
TITLE = "running row sums in float64"
SIZES = {"ROWS": 6, "COLS": 10}
DTYPES = ("f32",)
INPUTS = {"x": ("ROWS", "COLS")}
OUTPUTS = {"y": ("ROWS", "COLS")}
SCALARS = ("ROWS", "COLS")
FLOPS = "ROWS * COLS"
REFERENCE_IN_FLOAT64 = True


def reference(x):
    return np.cumsum(np.asarray(x, dtype=np.float64), axis=1)
"""


def _device_numpy() -> Any:
    """numpy under another module object (the validator then takes its arrays for device ones), counting what
    crosses to it with asarray."""
    xp = types.SimpleNamespace(**{name: getattr(np, name) for name in dir(np) if not name.startswith("__")})
    xp.uploads = 0

    def asarray(value: Any, *args: Any, **kwargs: Any) -> Any:
        xp.uploads += 1
        return np.array(value, *args, **kwargs)  # a copy, as a host-to-device one is

    xp.asarray = asarray
    xp.asnumpy = np.asarray
    return xp


def test_a_reference_in_float64_crosses_to_the_device_once(tmp_path: Path) -> None:
    path = tmp_path / "rv_widening.py"
    path.write_text(textwrap.dedent(WIDENING))
    declaration = describe_in_subprocess(path, sandbox=False, timeout_s=120)
    assert declaration.reference_in_float64 and not declaration.reference_takes_xp
    host, worker_end = start_host(declaration, "cuda", -1, sandbox=False)
    problem = DeclaredProblem(declaration)
    problem.code = RemoteCode(worker_end, declaration)
    try:
        with problem_code_allowed():
            inputs = problem.make_inputs(SIZES, "f32", 3, np)
        xp = _device_numpy()
        exact, rough, scales = problem._computed(inputs, SIZES, "f32", xp)
        assert scales is None and xp.uploads == 1
        assert rough["y"] is exact["y"]
        ref = problem.references(inputs, SIZES, "f32", xp)["y"]
        local = DeclaredProblem(declaration)
        with problem_code_allowed():
            expected = local.references(inputs, SIZES, "f32", np)["y"]
        assert np.array_equal(ref.values, expected.values) and np.array_equal(ref.scale, expected.scale)
    finally:
        problem.code.close()
        host.kill()


def test_timelines_steps_reports_a_version_without_recorded_steps(tmp_path: Path) -> None:
    store = Store(tmp_path / "peak.sqlite3")
    sid = store.create_session(problem="matmul", backend="cuda", dtype="f32", sizes={"M": 8}, device="d",
                               device_index=0, label=None)
    for total, steps in ((1.0, []), (2.0, [[0.0, "compile"], [1.5, "validate"]])):
        store.add_version(sid, parent=None, origin="submit", transformation=None, source="x", status="benchmarked",
                          timeline={"total_s": total, "phases": {"compile": total}, "steps": steps})
    store.close()
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "timelines.py"), "--data-dir", str(tmp_path),
                           "--steps", "3"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "its 3 longest steps of 0 recorded" in done.stdout
    assert "1.50 s  compile" in done.stdout and "0.50 s  validate" in done.stdout


@pytest.mark.parametrize("seed", range(400))
def test_every_input_set_ends_on_a_final_launch_it_was_told_of(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """measure's early stop (a pinned median, the wall-time budget) over random launch costs, checks between
    launches, budgets, rotations and min/max reps: the timed launches are whole rotations, every launch but each
    set's last is followed by a perturbation (its chunk's total says it is not final), and each set's last is not."""
    rnd = random.Random(seed)
    now = [0.0]
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(monotonic=lambda: now[0]))  # this module's clock only
    sets = rnd.choice([1, 2, 3, 5])
    per = rnd.choice([1e-5, 1e-4, 1e-3, 0.05, 0.4, 2.0])
    check = rnd.choice([0.0, per, 10 * per, 0.01])
    noise = rnd.choice([0.0, 1e-4, 0.05, 0.5])
    perturbed: dict[int, bool] = {}

    def warm(chunk: timing.Chunk) -> list[float]:
        now[0] += chunk.reps * per
        return [per * 1e3] * chunk.reps

    def timed(chunk: timing.Chunk) -> list[float]:
        times = []
        for rep in range(chunk.offset, chunk.offset + chunk.reps):
            now[0] += per + check
            perturbed[rep] = rep < chunk.total - sets  # as steps.benchmark's audit.last has it
            times.append(per * 1e3 * (1 + noise * rnd.random()))
        return times

    stats = timing.measure(timed, warm_timer=warm, budget_s=rnd.choice([0.05, 0.3, 1.0, 3.0]),
                           min_reps=rnd.choice([1, 3, 10, 50]), max_reps=rnd.choice([3, 10, 100, 10000]),
                           flops=1.0, rotation=sets)
    reps = stats["reps"]
    assert reps % sets == 0 and sorted(perturbed) == list(range(reps))
    assert [rep for rep in range(reps) if not perturbed[rep]] == list(range(reps - sets, reps))
