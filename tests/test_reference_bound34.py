"""Issue 34, point 5, through a real MCP client on lavapipe: a correct scan that sums in another order than the
session's reference kernel failed at a relative L2 error of 3.68e-7 against a bound of 3.5e-7, the bound's L (the
reduction length) being 1 for a cumsum (as many inputs as outputs). Against a kernel reference, L reaches the
scan's length; where it is only estimated, the failure says which L it used and how to declare it; a kernel wrong by
a real amount still fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import has_device
from tests.test_reference_kernel import call

pytestmark = [pytest.mark.anyio, pytest.mark.vulkan,
              pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")]

PROBLEM = '''"""Row-wise cumsum, checked against the user's kernel."""
NAME = "NAME_HERE"
SIZES = {"ROWS": 256, "COLS": 1024}
DTYPES = ("f32",)
INPUTS = {"x": ("ROWS", "COLS")}
OUTPUTS = {"y": ("ROWS", "COLS")}
SCALARS = ("ROWS", "COLS")
'''
HEAD = """// peak: entry=main groups=(cdiv(ROWS, 64), 1, 1)
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;
[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID) {
    uint row = id.x;
    if (row >= p.ROWS) return;
    uint base = row * p.COLS;
"""
SERIAL = HEAD + """    float acc = 0.0;
    for (uint c = 0; c < p.COLS; ++c) { acc += x[base + c]; y[base + c] = acc; }
}
"""
# Blocks of 32 summed apart and added to the running total of the blocks before: another order, as a parallel scan's.
BLOCKED = HEAD + """    float offset = 0.0;
    for (uint c0 = 0; c0 < p.COLS; c0 += 32) {
        float local = 0.0;
        uint end = min(c0 + 32, p.COLS);
        for (uint c = c0; c < end; ++c) { local += x[base + c]; y[base + c] = SCALE(offset + local); }
        offset += local;
    }
}
"""
RIGHT = BLOCKED.replace("SCALE(offset + local)", "(offset + local)")
# one element off by 2^-12 of its value: a real error, far above any order's rounding
WRONG = BLOCKED.replace("SCALE(offset + local)",
                        "((offset + local) * ((row == 3 && c == 700) ? (1.0 + 1.0 / 4096.0) : 1.0))")


@pytest.fixture
def folder(settings, tmp_path: Path) -> Path:
    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "scan34.py").write_text(PROBLEM.replace("NAME_HERE", "scan34") + 'TRAITS = ["scan"]\n')
    (problems / "plain34.py").write_text(PROBLEM.replace("NAME_HERE", "plain34"))
    settings.problem_dirs = [problems]
    return problems


async def _session(client, problem: str) -> str:
    session = await call(client, "start_session", {"problem": problem, "backend": "hlsl",
                                                   "reference_kernel": SERIAL})
    assert session["version_0"]["status"] == "benchmarked", session["version_0"]["message"]
    return session["session_id"]


async def test_a_scan_in_another_order_passes_and_a_real_error_still_fails(make_client, folder) -> None:
    async with make_client() as (client, _):
        sid = await _session(client, "scan34")
        right = await call(client, "submit_kernel", {"session_id": sid, "parent": 0, "source": RIGHT})
        assert right["status"] == "benchmarked", right["message"]
        assert "L: the reduction length, here 1024, the longest output axis" in right["message"], right["message"]
        wrong = await call(client, "submit_kernel", {"session_id": sid, "parent": 0, "source": WRONG})
        assert wrong["status"] == "failed" and wrong["failure"] == "wrong_result", wrong["message"]
        assert "(3, 700)" in wrong["message"] and "here 1024" in wrong["message"], wrong["message"]


async def test_an_estimated_reduction_length_is_named_with_how_to_declare_it(make_client, folder) -> None:
    """The file says nothing of a scan (its derived trait: elementwise): L is estimated as 1, the same kernel in
    another order fails, and the failure says L was 1, estimated, and how to declare it."""
    async with make_client() as (client, _):
        sid = await _session(client, "plain34")
        answer = await call(client, "submit_kernel", {"session_id": sid, "parent": 0, "source": RIGHT})
        assert answer["status"] == "failed" and answer["failure"] == "wrong_result", answer["message"]
        message = answer["message"]
        assert "L: the reduction length, here 1, estimated as input elements per output element" in message, message
        assert 'declare REDUCTION = "<' in message and 'TRAITS = ["scan"]' in message, message
