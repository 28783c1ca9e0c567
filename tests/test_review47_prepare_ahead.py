"""Review 47 of the prepare-ahead commits (0af9f39, f8c474e, ab0857e): two behaviours they changed, both failing on
ab0857e and fixed since.

1. A validation whose first trial is its fresh trial (fewer than 3 trials: PEAK_MCP_VALIDATION_TRIALS=1 or 2 at the
   session's sizes; every generality size, which validates with one trial) takes a spare set drawn ahead with the
   reference's spot check left out, so the spot check of the device float64 reference is never done there.
2. SpareSets keeps no budget of its own: it holds sets past the reference cache's budget, for every key, until the
   device runs out ("memory as the reference cache's" says its docstring)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from peak_mcp.backends.base import Compiled
from peak_mcp.backends.registry import launch_spec
from peak_mcp.evaluation import reference_cache, steps
from peak_mcp.evaluation.reference_cache import KEPT, SPARE, fresh_trial
from tests.test_benchmark_audit import PROBLEM, SIZES, _honest
from tests.test_prepare_ahead import _Host


def _spot_checks(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    asked: list[bool] = []
    reference = steps._reference

    def recorded(xp: Any, problem: Any, inputs: Any, sizes: Any, dtype: str, seed: int, spot_check: bool) -> Any:
        asked.append(spot_check)
        return reference(xp, problem, inputs, sizes, dtype, seed, spot_check)

    monkeypatch.setattr(steps, "_reference", recorded)
    return asked


@pytest.mark.parametrize("trials", [1, 2, 3])
def test_the_reference_is_spot_checked_whether_or_not_the_fresh_set_was_drawn_ahead(
        trials: int, monkeypatch: pytest.MonkeyPatch) -> None:
    SPARE.clear()
    KEPT.clear()
    asked = _spot_checks(monkeypatch)
    steps.prepare(_Host(), PROBLEM, "f32", SIZES, trials=trials, seed=5, progress=lambda _: None, spare_fresh=True)
    fresh = fresh_trial(PROBLEM, "f32", SIZES, trials)
    assert fresh is not None and len(SPARE) == (fresh != 0)  # no spare set for a fresh first trial
    compiled = Compiled(handle=_honest, spec=launch_spec(PROBLEM.naive_kernel("cuda", "f32"), "cuda",
                                                          PROBLEM.symbols))
    validated = steps.validate(_Host(), compiled, PROBLEM, "f32", SIZES, trials=trials, seed=5,
                               progress=lambda _: None)
    validated.close()
    SPARE.clear()
    KEPT.clear()
    assert validated.verdict.passed
    assert any(asked), f"no reference was drawn with its spot check (prepare and validate asked {asked})"


def test_spare_sets_keep_within_a_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    SPARE.clear()
    budget = 1 << 16
    monkeypatch.setattr(reference_cache, "spare_host_budget", lambda: budget)
    inputs = {"A": np.zeros(budget // 4 // 8, np.float64)}  # a quarter of the budget a set
    held = 0
    for n in range(1, 9):  # eight sessions' sizes
        key = SPARE.key(PROBLEM, np, "f32", {"M": n, "N": n, "K": n}, False, owner=n)
        held += SPARE.put(key, np, dict(inputs), {})
    assert len(SPARE) * (budget // 4) <= budget, f"{len(SPARE)} spare sets of a quarter of the budget each are held"
    assert held == 8  # each was taken in, the oldest making room
    assert SPARE.count(SPARE.key(PROBLEM, np, "f32", {"M": 8, "N": 8, "K": 8}, False, owner=8)) == 1
    assert SPARE.count(SPARE.key(PROBLEM, np, "f32", {"M": 1, "N": 1, "K": 1}, False, owner=1)) == 0
    SPARE.clear()


def test_the_spare_budget_follows_the_hosts_free_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """A KernelBench GEMV's set is a 512 MiB matrix: a fixed 1 GiB budget (half of it a set) refused it on a
    128 GiB GPU host, and every submission drew its fresh trial again (run A, session 48)."""
    monkeypatch.setattr(reference_cache, "_available_host_bytes", lambda: 100 << 30)  # 1/16: 6.25 GiB
    assert reference_cache.spare_host_budget() // 2 > (512 << 20) + (1 << 20)
    monkeypatch.setattr(reference_cache, "_available_host_bytes", lambda: 1 << 40)
    assert reference_cache.spare_host_budget() == reference_cache.SPARE_HOST_MAX_BYTES
    monkeypatch.setattr(reference_cache, "_available_host_bytes", lambda: 1 << 30)  # a small host: the floor
    assert reference_cache.spare_host_budget() == reference_cache.HOST_BUDGET_BYTES
    monkeypatch.setattr(reference_cache, "_available_host_bytes", lambda: None)
    assert reference_cache.spare_host_budget() == reference_cache.HOST_BUDGET_BYTES
