"""A problem file without a Python reference: the user's kernel (start_session's reference_kernel) is v0 and the
reference every candidate is checked against, in the worker, on the same inputs, at every size checked (lavapipe).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from peak_mcp.api.responses import whole_answer
from peak_mcp.evaluation.kernel_reference import _one_ulp
from peak_mcp.problems.declared import prelude
from tests.conftest import has_device

pytestmark = pytest.mark.anyio
VULKAN = pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")
ROOT = Path(__file__).resolve().parent.parent
NAIVE = prelude("hlsl", "f32") + (ROOT / "peak_mcp/problems/builtin/softmax.hlsl").read_text()
# The softmax problem with its data only: no reference, no error scale, no naive kernel.
NO_REFERENCE = '''"""Row softmax, checked against the user's kernel."""
NAME = "my_softmax"
SIZES = {"ROWS": 64, "COLS": 100}
DTYPES = ("f32",)
INPUTS = {"x": ("ROWS", "COLS")}
OUTPUTS = {"y": ("ROWS", "COLS")}
SCALARS = ("ROWS", "COLS")
FLOPS = "5 * ROWS * COLS"
RANGE = {"x": (-4.0, 4.0)}
REDUCTION = "COLS"
'''
SIZES = {"ROWS": 64, "COLS": 100}


def scaled_element(eps: float) -> str:
    """The naive kernel with y[1, 2] multiplied by 1 + eps."""
    text, count = re.subn(r"y\[base \+ c\] = from_f32\((.*)\);",
                          rf"y[base + c] = from_f32((\1) * ((row == 1 && c == 2) ? (1.0 + {eps!r}) : 1.0));", NAIVE)
    assert count == 1
    return text


async def call(client: Any, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return whole_answer(tool, result)  # the long parts (source, ABI, ...) back from the text


@pytest.fixture
def folder(settings, tmp_path: Path) -> Path:
    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "my_softmax.py").write_text(NO_REFERENCE)
    settings.problem_dirs = [problems]
    return problems


@VULKAN
async def test_candidates_are_checked_against_the_reference_kernel(make_client, folder) -> None:
    async with make_client() as (client, _):
        listed = await call(client, "list_problems", {})
        info = next(p for p in listed["problems"] if p["name"] == "my_softmax")
        assert "reference_kernel" in info["reference"]
        refused = await client.call_tool("start_session", {"problem": "my_softmax", "backend": "hlsl"})
        assert refused.is_error and "reference_kernel=SOURCE" in refused.content[0].text

        session = await call(client, "start_session", {"problem": "my_softmax", "backend": "hlsl", "sizes": SIZES,
                                                       "reference_kernel": NAIVE})
        v0 = session["version_0"]
        assert v0["origin"] == "reference" and v0["status"] == "benchmarked", v0["message"]
        assert "reference kernel (v0)" in v0["validation"]["reference"]
        sid = session["session_id"]
        for name in ("1_groupshared.hlsl", "2_wave.hlsl"):  # other orders of the sums, fast exp: within the bound
            good = await call(client, "submit_kernel", {"session_id": sid, "parent": 0,
                                                        "source": (ROOT / "examples/softmax/hlsl" / name).read_text()})
            assert good["status"] == "benchmarked", (name, good["message"])
            assert good["generality"]["passed"] is True, good["generality"]
        wrong = await call(client, "submit_kernel", {"session_id": sid, "parent": 0, "source": scaled_element(2**-10)})
        assert wrong["status"] == "failed" and wrong["failure"] == "wrong_result", wrong["message"]
        assert "(1, 2)" in wrong["message"] and "reference kernel (v0)" in wrong["validation"]["reference"]


@VULKAN
async def test_a_reference_kernel_that_fails_its_own_checks_is_named(make_client, folder) -> None:
    unwritten_last_row = NAIVE.replace("if (row >= p.ROWS) return;", "if (row + 1 >= p.ROWS) return;")
    assert unwritten_last_row != NAIVE
    async with make_client() as (client, _):
        session = await call(client, "start_session", {"problem": "my_softmax", "backend": "hlsl", "sizes": SIZES,
                                                       "reference_kernel": unwritten_last_row})
        v0 = session["version_0"]
        assert v0["status"] == "error" and "the reference kernel (v0)" in v0["message"], v0
        assert "unwritten" in v0["message"]


def test_one_ulp_moves_every_element_by_one_unit() -> None:
    x = np.array([1.0, -2.5, 0.0, -0.0, 3e-39, 65504.0], np.float32)
    moved = _one_ulp(x, np, seed=3)
    steps = np.abs(moved.view(np.int32).astype(np.int64) - x.view(np.int32).astype(np.int64))
    assert (steps == 1).all() and np.isfinite(moved).all()
    assert moved[2] != 0 and moved[3] != 0  # zeros move away from zero, never to a NaN pattern
    bf16 = np.array([0x3F80, 0xBF80, 0x0000, 0x8000], np.uint16)  # 1, -1, +0, -0 as bf16 bits
    assert (np.abs(_one_ulp(bf16, np, seed=1).astype(np.int64) - bf16.astype(np.int64)) == 1).all()
