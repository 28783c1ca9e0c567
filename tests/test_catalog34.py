"""Issue 34, "the loop never misleads", through a real MCP client: get_transformation in a session states the
session's own kernel contract, not the one its text's example was written for (a LayerNorm agent was told to keep
matmul's `bindings 0, 1, 2, M, N, K`); suggest_next reads a row-per-block reduction from what the head's code does
whatever its names (it told an agent whose head was one to apply it first), and quotes a measured figure only with
where it was measured."""

from __future__ import annotations

import re

import pytest

from peak_mcp.catalog.features import source_features
from tests.conftest import has_device, skip_reason

pytestmark = pytest.mark.anyio
STRIDED_ROW, TREE_REDUCTION = "threads striding over a row", "a shared-memory tree reduction"
MATMUL_CONTRACT = ("const T* A, const T* B, float* C, int M, int N", "bindings 0, 1, 2", "`M, N, K`")

# An agent's HLSL softmax: one group per row, its threads striding by a literal 256 (not `NT` or `blockDim.x`), the
# partials combined by a groupshared tree whose stride is `off`. It does row-per-block-reduction's work.
ROW_PER_GROUP = """// peak: entry=main groups=(min(ROWS, 65535), cdiv(ROWS, 65535), 1)
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;

groupshared float sdata[256];

[numthreads(256, 1, 1)]
void main(uint3 gid : SV_GroupID, uint3 gtid : SV_GroupThreadID)
{
    const uint row = gid.y * 65535 + gid.x;
    if (row >= p.ROWS)
        return;  // the whole group: its barriers stay in uniform control flow
    const uint t = gtid.x;
    const uint base = row * p.COLS;
    float m = -3.402823466e38;
    for (uint c = t; c < p.COLS; c += 256)
        m = max(m, x[base + c]);
    sdata[t] = m;
    GroupMemoryBarrierWithGroupSync();
    for (uint off = 128; off > 0; off >>= 1) {
        if (t < off)
            sdata[t] = max(sdata[t], sdata[t + off]);
        GroupMemoryBarrierWithGroupSync();
    }
    const float rowmax = sdata[0];
    GroupMemoryBarrierWithGroupSync();
    float s = 0.0;
    for (uint c = t; c < p.COLS; c += 256)
        s += exp(x[base + c] - rowmax);
    sdata[t] = s;
    GroupMemoryBarrierWithGroupSync();
    for (uint off = 128; off > 0; off >>= 1) {
        if (t < off)
            sdata[t] += sdata[t + off];
        GroupMemoryBarrierWithGroupSync();
    }
    const float total = sdata[0];
    for (uint c = t; c < p.COLS; c += 256)
        y[base + c] = exp(x[base + c] - rowmax) / total;
}
"""


async def call(client, tool: str, args: dict) -> dict:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def text_of(client, args: dict) -> tuple[str, str]:
    """get_transformation's body in both views: the structured field and the text an agent reads."""
    result = await client.call_tool("get_transformation", args)
    assert not result.is_error, result.content[0].text
    return result.structured_content["body"], result.content[0].text


async def test_get_transformation_in_a_session_states_its_own_contract(make_client) -> None:
    """coalesced-access is written against matmul; read for a softmax session it keeps softmax's ABI."""
    async with make_client() as (client, service):
        sid = (await call(client, "start_session", {"problem": "softmax", "backend": "cuda",
                                                    "sizes": {"ROWS": 8, "COLS": 64}}))["session_id"]
        body, text = await text_of(client, {"transformation": "coalesced-access", "session_id": sid})
        # not a text for softmax (GEMM-like problems only): said first, with where this session's texts are
        assert body.startswith("> Not written for softmax: this text is for traits gemm, convolution"), body[:300]
        keep = body.split("## Keep unchanged", 1)[1].split("\n## ", 1)[0]
        for view in (keep, text):
            assert not any(abi in view for abi in MATMUL_CONTRACT), view
        assert "This session's kernel contract (ABI) for softmax (cuda, f32)" in keep, keep
        abi = service.problem("softmax").abi("cuda", "f32")
        assert "void <entry>(const float* x, float* y, int ROWS, int COLS)" in abi  # the ABI it should state
        assert all(line.strip() in keep for line in abi.splitlines() if line.strip()), keep
        assert "- HLSL: `// peak: entry=main groups=" not in body  # the session's backend's items only
        assert "- CUDA/HIP: `// peak: entry=<same> grid=" in body
        # An HLSL session of another problem: its bindings, not matmul's; a text with no contract items is as is.
        hlsl, _ = await text_of(client, {"transformation": "hlsl-groupshared-tiling", "session_id": sid,
                                         "backend": "hlsl"})
        assert "push constants M, N, K" not in hlsl and "Bindings 0 (A), 1 (B), 2 (C" not in hlsl, hlsl
        assert "kernel contract (ABI) for softmax (hlsl, f32)" in hlsl and "[[vk::binding(0)]] x (float" in hlsl
        plain = (await call(client, "get_transformation", {"transformation": "split-k"}))["body"]
        assert "kernel contract" not in plain.split("## Keep unchanged", 1)[1].split("\n## ", 1)[0].lower()


async def test_get_transformation_without_a_session_says_whose_contract_its_text_keeps(make_client) -> None:
    async with make_client() as (client, _):
        for args in ({"transformation": "coalesced-access"}, {"transformation": "coalesced-access", "backend": "hlsl"}):
            body, text = await text_of(client, args)
            keep = body.split("## Keep unchanged", 1)[1].split("\n## ", 1)[0]
            assert "bindings 0, 1, 2" in keep  # the text's own items, read as the example's
            note = ("are matmul's, the problem this text's example is written for. In a session, keep that "
                    "session's own contract instead")
            assert note in keep and note in text, keep
            assert keep.index(note) < keep.index("bindings 0, 1, 2")
        # A row text whose items fit several problems alike names none of them.
        body, _ = await text_of(client, {"transformation": "hlsl-wave-reduction"})
        assert "are the text's example problem's" in body and "softmax's" not in body, body


def test_a_row_per_group_reduction_is_read_from_the_code_whatever_its_names() -> None:
    features = source_features(ROW_PER_GROUP)
    assert {STRIDED_ROW, TREE_REDUCTION} <= set(features), features
    assert all("row-per-block-reduction" in features[f] for f in (STRIDED_ROW, TREE_REDUCTION))
    # A loop from the thread index by another step is no stride over the row; one halving loop is no tree alone.
    other = ROW_PER_GROUP.replace("c += 256", "c += 2").replace("sdata[t + off]", "sdata[t]")
    assert not {STRIDED_ROW, TREE_REDUCTION} & set(source_features(other)), source_features(other)


@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
async def test_suggest_next_reads_the_prerequisite_from_the_code_and_sources_its_figures(make_client) -> None:
    """The head is a row-per-block reduction in all but its names: row-per-block-reduction is not proposed, and
    hlsl-wave-reduction is not sent back to it first. A measured figure says whose measurement it is."""
    async with make_client() as (client, _):
        sid = (await call(client, "start_session", {"problem": "softmax", "backend": "hlsl",
                                                    "sizes": {"ROWS": 16, "COLS": 100}}))["session_id"]
        naive = await call(client, "suggest_next", {"session_id": sid, "limit": 25})
        first = next(s for s in naive["suggestions"] if s["id"] == "row-per-block-reduction")
        assert "0.29× its parent on llvmpipe (softmax hlsl, the text's own measurement, not this session's)" in \
            first["why"], first
        report = await call(client, "submit_kernel", {"session_id": sid, "source": ROW_PER_GROUP})
        assert report["status"] == "benchmarked" and report["version"] == 1, report.get("message")
        got = await call(client, "suggest_next", {"session_id": sid, "limit": 25})
        assert got["head"] == 1 and {STRIDED_ROW, TREE_REDUCTION} <= set(got["features"]), got
        ids = [s["id"] for s in got["suggestions"]]
        assert "row-per-block-reduction" not in ids, got["suggestions"]
        wave = next(s for s in got["suggestions"] if s["id"] == "hlsl-wave-reduction")
        assert not wave.get("first") and "not done yet" not in wave["why"], wave
        assert "0.43× its parent on llvmpipe (row_sum hlsl, the text's own measurement" in wave["why"], wave
        for s in naive["suggestions"] + got["suggestions"]:  # every figure with its source: an attempt or the text's
            for figure in re.finditer(r"\d[\d.]*×", s["why"]):
                around = s["why"][max(0, figure.start() - 40):figure.end() + 80]
                assert re.search(r"\bv\d+\b|the text's own measurement", around), (s["id"], s["why"])


def test_a_line_that_led_into_another_backends_item_no_longer_ends_in_a_colon() -> None:
    """The sequence experiment's LLM (exp43) read "reading both operands as 128-bit vectors:" in an HLSL brief of
    register-blocking-2d and found no code under it: the CUDA/HIP item it led into was left out. Where something of
    this backend's still follows, the colon stays."""
    from peak_mcp.catalog.rendering import render_body
    from peak_mcp.catalog.transformations import Catalog, builtin_transformations_dir

    body = Catalog.load(builtin_transformations_dir()).get("register-blocking-2d").body
    hlsl, cuda = render_body(body, "hlsl"), render_body(body, "cuda")
    assert "reading both operands as 128-bit vectors.\n" in hlsl and "(the HLSL code is below).\n" in hlsl
    assert "reading both operands as 128-bit vectors:\n   - CUDA/HIP:" in cuda
    mixed = "1. Load:\n   - CUDA/HIP: `a`\n   - HLSL: `b`\n2. Store:\n   - CUDA/HIP: `c`\n3. Done.\n"
    assert render_body(mixed, "hlsl") == "1. Load:\n   - HLSL: `b`\n2. Store.\n3. Done.\n"


async def test_a_text_asked_for_on_a_backend_it_is_not_written_for_says_so_first(make_client) -> None:
    """agent45 #16, #17: fast-exp2 (CUDA/HIP) read in an HLSL context left out its helper and then told the agent to
    use it; it now says first that it is not for HLSL and shows the text as written."""
    async with make_client() as (client, _):
        plain, _ = await text_of(client, {"transformation": "fast-exp2", "backend": "hlsl"})
        sid = (await call(client, "start_session", {"problem": "softmax", "backend": "cuda",
                                                    "sizes": {"ROWS": 8, "COLS": 64}}))["session_id"]
        in_session, _ = await text_of(client, {"transformation": "fast-exp2", "session_id": sid, "backend": "hlsl"})
        for body in (plain, in_session):
            assert body.startswith("> Not for hlsl: this text is written for cuda, hip only"), body[:200]
            assert "ex2.approx.ftz.f32" in body and "left out of this hlsl brief" not in body
        cuda, _ = await text_of(client, {"transformation": "fast-exp2", "session_id": sid})
        assert not cuda.startswith("> Not for") and "ex2.approx.ftz.f32" in cuda
