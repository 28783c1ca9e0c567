"""Issue 34, point 9: generality evaluates a kernel's launch line at the largest sizes the problem allows, which it
never runs: a row sum dispatching one group per row (groups=(ROWS, 1, 1)) passed every sampled size and broke
Vulkan's 65,535 groups along x at ROWS=70,000. Now it is not_general, with the size, the expression, the limit and
the way out; spread over y, or bounded by a session constraint, it passes."""

from __future__ import annotations

import pytest

from peak_mcp.core.launch import parse_annotation
from peak_mcp.evaluation.generality import LAUNCH_LIMIT, largest_sizes, launch_breach
from peak_mcp.problems.shipped import get_problem
from tests.conftest import has_device
from tests.test_loop34 import call

pytestmark = pytest.mark.anyio

# One group of 64 per row: each thread sums a strided part of the row, then a groupshared tree.
PER_ROW = """// peak: entry=main groups=(ROWS, 1, 1)
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;
groupshared float part[64];

[numthreads(64, 1, 1)]
void main(uint3 gid : SV_GroupID, uint tid : SV_GroupIndex)
{
    const uint row = ROW;
    if (row >= p.ROWS) return;  // uniform over the group: before any barrier
    float acc = 0.0;
    for (uint c = tid; c < p.COLS; c += 64)
        acc += x[row * p.COLS + c];
    part[tid] = acc;
    GroupMemoryBarrierWithGroupSync();
    for (uint s = 32; s > 0; s >>= 1) {
        if (tid < s) part[tid] += part[tid + s];
        GroupMemoryBarrierWithGroupSync();
    }
    if (tid == 0) y[row] = part[0];
}
"""
ONE_D = PER_ROW.replace("ROW;", "gid.x;")
SPREAD = PER_ROW.replace("groups=(ROWS, 1, 1)", "groups=(min(ROWS, 65535), cdiv(ROWS, 65535), 1)").replace(
    "ROW;", "gid.y * 65535 + gid.x;")


@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")
async def test_a_launch_past_the_group_limit_at_the_largest_sizes_is_not_general(make_client) -> None:
    async with make_client() as (client, _):
        sid = (await call(client, "start_session", {"problem": "row_sum", "backend": "hlsl",
                                                    "sizes": {"ROWS": 64, "COLS": 64}}))["session_id"]
        report = await call(client, "submit_kernel", {"session_id": sid, "source": ONE_D})
        assert report["status"] == "not_general", report["message"]
        assert report["failure"] == f"generality_{LAUNCH_LIMIT}", report
        message = report["message"]
        # the size (ROWS grown to what the buffers allow at the default COLS), the expression, the limit, the bound
        assert "ROWS=262144" in message.replace(",", ""), message
        assert "groups=(ROWS, 1, 1)" in message and "groups dimension x=262144 is over 65535" in message, message
        assert "it launches up to ROWS=65,535" in message and "grid-stride loop" in message, message
        # nothing ran wrong there: no "wrong at N sampled sizes", no hint to guard loads and stores
        assert "cannot run at the largest sizes the problem allows" in message and "wrong at" not in message, message
        assert "guard loads" not in message, message
        failed = report["generality"]["failures"][-1]
        assert failed["check"] == LAUNCH_LIMIT and failed["sizes"] == {"ROWS": 262144, "COLS": 8192}
        assert report["head"] == 0  # the naive kernel stays head

        spread = await call(client, "submit_kernel", {"session_id": sid, "source": SPREAD})
        assert spread["status"] == "benchmarked" and spread["generality"]["passed"] is True, spread["message"]

        bounded = (await call(client, "start_session", {"problem": "row_sum", "backend": "hlsl",
                                                        "sizes": {"ROWS": 64, "COLS": 64},
                                                        "constraints": ["ROWS <= 65535"]}))["session_id"]
        report = await call(client, "submit_kernel", {"session_id": bounded, "source": ONE_D})
        assert report["status"] == "benchmarked" and report["generality"]["passed"] is True, report["message"]


def test_cuda_launch_lines_are_checked_against_cuda_limits() -> None:
    """grid.y past 65,535 and a block of COLS threads break at the largest sizes; grid.x may reach 2**31 - 1."""
    problem = get_problem("row_sum")
    sizes = largest_sizes(problem, {"ROWS": 64, "COLS": 64}, [])
    assert sizes == [{"ROWS": 262144, "COLS": 8192}, {"ROWS": 8192, "COLS": 262144}]

    def breach(launch: str) -> str | None:
        spec = parse_annotation(f"// peak: entry=k {launch} shared=0\n", needs=("grid", "block"),
                                symbols=problem.symbols)
        failure = launch_breach(spec, sizes)
        return failure.message if failure else None

    assert breach("grid=(ROWS, 1, 1) block=(256, 1, 1)") is None
    assert "grid dimension y=262144 is over 65535" in (breach("grid=(1, ROWS, 1) block=(256, 1, 1)") or "")
    over = breach("grid=(ROWS, 1, 1) block=(min(COLS, 2048), 1, 1)") or ""
    assert "block dimension x=2048 is over 1024" in over and "it launches up to COLS=1,024" in over, over
    # a configuration whose `where` rules out the large sizes is not blamed for them
    assert launch_breach(parse_annotation("// peak: entry=k grid=(1, ROWS, 1) block=(B, 1, 1)\n"
                                          "// peak: params B=[64]\n// peak: where=ROWS <= 60000\n",
                                          needs=("grid", "block"), symbols=problem.symbols), sizes) is None


TINY_ROWS = '''NAME = "tinyrows42"
SIZES = {"ROWS": 64, "COLS": 16}
INPUTS = {"x": ("ROWS", "COLS")}
OUTPUTS = {"y": ("ROWS",)}


def reference(x, *, xp):
    return x.sum(axis=1)
'''


@pytest.mark.anyio
async def test_a_problem_files_small_defaults_still_reach_the_group_limit(make_client) -> None:
    """An agent's groups=(ROWS, 1, 1) passed against a problem file whose defaults were ROWS=64: grown 64x they stayed
    at 4,096 rows. Each symbol now grows to at least 131,072 where the buffers allow."""
    async with make_client() as (client, service):
        await call(client, "define_problem", {"source": TINY_ROWS})
        problem = service.problem("tinyrows42")
        sizes = largest_sizes(problem, {"ROWS": 64, "COLS": 16}, [])
        assert {"ROWS": 131072, "COLS": 16} in sizes, sizes
        spec = parse_annotation("// peak: entry=main groups=(ROWS, 1, 1)\n", needs=("entry", "groups"),
                                symbols=problem.symbols)
        failure = launch_breach(spec, sizes)
        assert failure is not None and "groups dimension x=131072 is over 65535" in failure.message, failure
