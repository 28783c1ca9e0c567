"""The checks go over an output in chunks (a 1.6G-element KernelBench output took their float64 temporaries out of
an H200's memory): with chunks of 7 elements, every verdict on a faulty kernel is word for word the one a single
chunk gives, counts and first indices included, and the benchmark's audit still catches a replayed result."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import peak_mcp.core.chunks
from peak_mcp.backends.base import Compiled
from peak_mcp.backends.registry import launch_spec
from peak_mcp.evaluation.steps import validate
from tests.test_benchmark_audit import PROBLEM, SIZES, HostAsDevice, _honest, _run


def _wrong_in_a_row(a: np.ndarray, b: np.ndarray, sizes: dict[str, int], launch: int) -> np.ndarray:
    out = _honest(a, b, sizes, launch)
    out[5, 3:17] += 0.5  # spans chunk boundaries at chunks of 7
    return out


def _never_writes(a: np.ndarray, b: np.ndarray, sizes: dict[str, int], launch: int) -> None:
    return None  # the poison stays in every element


def _nan_spots(a: np.ndarray, b: np.ndarray, sizes: dict[str, int], launch: int) -> np.ndarray:
    out = _honest(a, b, sizes, launch)
    out[3, 2] = np.inf
    out[11, 19] = np.nan
    return out


def _racy(a: np.ndarray, b: np.ndarray, sizes: dict[str, int], launch: int) -> np.ndarray:
    out = _honest(a, b, sizes, launch)
    out[7, ::3] += 1e-7 * (launch % 2)  # within the bound, but not the same twice
    return out


def _mutates(a: np.ndarray, b: np.ndarray, sizes: dict[str, int], launch: int) -> np.ndarray:
    out = _honest(a, b, sizes, launch)
    b[2, 4:13] = 0.0
    return out


def _verdict(kernel: Any) -> dict[str, Any]:
    source = PROBLEM.naive_kernel("cuda", "f32")
    compiled = Compiled(handle=kernel, spec=launch_spec(source, "cuda", PROBLEM.symbols))
    validated = validate(HostAsDevice(), compiled, PROBLEM, "f32", SIZES, trials=2, seed=5, progress=lambda _: None)
    validated.close()
    return validated.verdict.model_dump(exclude={"seconds"})


@pytest.mark.parametrize("kernel", [_wrong_in_a_row, _never_writes, _nan_spots, _racy, _mutates, _honest])
def test_chunked_checks_say_what_one_chunk_says(kernel: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = _verdict(kernel)
    monkeypatch.setattr(peak_mcp.core.chunks, "CHUNK_ELEMENTS", 7)
    assert _verdict(kernel) == whole
    if kernel is not _honest:
        assert not whole["passed"] and whole["check"], whole


def test_each_fault_is_named_through_the_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peak_mcp.core.chunks, "CHUNK_ELEMENTS", 7)
    checks = {kernel.__name__: _verdict(kernel)["check"]
              for kernel in (_wrong_in_a_row, _never_writes, _nan_spots, _racy, _mutates)}
    assert checks == {"_wrong_in_a_row": "wrong_result", "_never_writes": "unwritten_output",
                      "_nan_spots": "nan_or_inf", "_racy": "nondeterministic", "_mutates": "input_modified"}
    wrong = _verdict(_wrong_in_a_row)
    assert wrong["count"] == 14 and tuple(wrong["samples"][0]["at"]) == (5, 3), wrong
    assert _verdict(_never_writes)["count"] == SIZES["M"] * SIZES["N"]


def test_the_audit_catches_a_replay_through_the_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peak_mcp.core.chunks, "CHUNK_ELEMENTS", 7)
    cache: dict[bytes, np.ndarray] = {}

    def replaying(a: np.ndarray, b: np.ndarray, sizes: dict[str, int], launch: int) -> np.ndarray:
        key = a.tobytes()[:64] + b.tobytes()[:64]
        return cache.setdefault(key, _honest(a, b, sizes, launch))

    timing = _run(replaying, monkeypatch, sets=2)
    assert not timing.recheck.passed and timing.recheck.check == "wrong_result", timing.recheck


def test_input_sets_that_would_crowd_the_device_become_one() -> None:
    """Two sets of a 1.6G-element softmax (45 GB each) took an H200 past its memory: validate takes fewer sets where
    they would hold more than SETS_SHARE of the device, and as many as asked where they fit."""
    import types

    from peak_mcp.evaluation.steps import ArrayModule, set_bytes, sets_that_fit

    def device(total: int) -> ArrayModule:
        runtime = types.SimpleNamespace(memGetInfo=lambda: (total // 2, total))
        return ArrayModule(types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime)), "cuda")

    small = {"M": 64, "N": 64, "K": 64}
    huge = {"M": 65536, "N": 65536, "K": 4096}
    one = set_bytes(PROBLEM, "f32", huge)
    assert one >= 65536 * 65536 * 16  # the reference's value and scale per output element at least
    assert sets_that_fit(PROBLEM, "f32", small, 2, device(140 << 30)) == 2
    assert sets_that_fit(PROBLEM, "f32", huge, 2, device(140 << 30)) == 1
    assert sets_that_fit(PROBLEM, "f32", huge, 2, ArrayModule(np, "host")) == 2  # host memory: as asked


BOUND_PROBE = r'''
import json, sys
import numpy as np
import peak_mcp.core.chunks as chunks
from peak_mcp.problems.loading import allow_problem_code
from peak_mcp.problems.shipped import get_problem
allow_problem_code()
out = {}
for name, sizes, dtype in (("softmax", {"ROWS": 5, "COLS": 37}, "f32"), ("rmsnorm", {"ROWS": 6, "COLS": 29}, "bf16"),
                           ("row_sum", {"ROWS": 9, "COLS": 40}, "f16")):
    problem = get_problem(name)
    inputs = problem.make_inputs(sizes, dtype, 3, np)
    chunks.CHUNK_ELEMENTS = 1 << 25
    whole = problem.references(inputs, sizes, dtype, np)
    chunks.CHUNK_ELEMENTS = 7
    parts = problem.references(inputs, sizes, dtype, np)
    out[name] = {k: {"values": float(np.max(np.abs(whole[k].values - parts[k].values))),
                     "scale": float(np.max(np.abs(whole[k].scale - parts[k].scale) / whole[k].scale)),
                     "norm": abs(whole[k].norm - parts[k].norm) / whole[k].norm,
                     "rel_l2": abs(whole[k].rel_l2 - parts[k].rel_l2) / whole[k].rel_l2} for k in whole}
print(json.dumps(out))
'''


def test_a_problem_files_bound_built_in_chunks_is_the_whole_arrays_bound() -> None:
    """The reference's bound (lp, m, |lp - ref|, folded) is made a chunk at a time: the same bound, to rounding."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", BOUND_PROBE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert set(found) == {"softmax", "rmsnorm", "row_sum"}
    for outputs in found.values():
        for gaps in outputs.values():
            assert gaps["values"] == 0.0 and max(gaps["scale"], gaps["norm"], gaps["rel_l2"]) < 1e-12, gaps
