"""A catalog text's code runs correctly, not only compiles (tests/test_texts_compile.py): a kernel written the way
the text says, around its own fence, goes through the server on lavapipe at sizes that are not tile multiples.

vectorized-loads: an LLM once read a whole-tile test (`m0 + BM <= M && n0 + BN <= N`) that kept 3 of 4 groups of a
192x192 C on scalar loads, and a float4 load of A that its rule for a transposed tile forbids. The text now loads B
(tile Bs[k][n], not transposed) and stores C through its helpers, under a uniform pitch test and a per-vector bound;
A keeps the parent's scalar loads into its transposed tile As[k][m]. The kernel below is register-blocking-2d's
128x128 layout with the text's HLSL fence pasted in and called as its steps say (bRow = tid / 32, bCol = (tid % 32)
* 4, the vector stored whole before the barrier by every thread).
"""

from __future__ import annotations

import pytest

from peak_mcp.api.responses import whole_answer
from peak_mcp.catalog.rendering import code_examples, render_body
from peak_mcp.catalog.transformations import Catalog, builtin_transformations_dir
from tests.conftest import has_device, skip_reason

pytestmark = [pytest.mark.vulkan, pytest.mark.anyio]
if not has_device("hlsl"):
    pytestmark.append(pytest.mark.skip(reason=f"no Vulkan device: {skip_reason('hlsl')}"))

KERNEL = """// peak: entry=main groups=(cdiv(N, 128), cdiv(M, 128), 1)
#define BM 128
#define BN 128
#define BK 8
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> A;
FENCE
groupshared float4 As[BK][BM / 4 + 1];  // transposed: A keeps its scalar loads
groupshared float4 Bs[BK][BN / 4];

[numthreads(256, 1, 1)]
void main(uint3 gid : SV_GroupID, uint tid : SV_GroupIndex)
{
    const uint tx = tid % 16, ty = tid / 16, m0 = gid.y * BM, n0 = gid.x * BN;
    const uint bRow = tid / 32, bCol = (tid % 32) * 4;
    float4 acc[8][2];
    [unroll] for (uint i = 0; i < 8; ++i) { acc[i][0] = 0.0; acc[i][1] = 0.0; }
    for (uint k0 = 0; k0 < p.K; k0 += BK) {
        [unroll] for (uint r = 0; r < 4; ++r) {
            uint idx = tid + r * 256, am = idx / BK, ak = idx % BK;
            float a = 0.0;
            if (m0 + am < p.M && k0 + ak < p.K) a = A[(m0 + am) * p.K + k0 + ak];
            As[ak][am >> 2][am & 3] = a;
        }
        Bs[bRow][bCol / 4] = loadB4(k0 + bRow, n0 + bCol);
        GroupMemoryBarrierWithGroupSync();
        [unroll] for (uint k = 0; k < BK; ++k) {
            float4 a0 = As[k][ty], a1 = As[k][16 + ty], b0 = Bs[k][tx], b1 = Bs[k][16 + tx];
            float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            [unroll] for (uint i = 0; i < 8; ++i) { acc[i][0] = mad(a[i], b0, acc[i][0]);
                                                    acc[i][1] = mad(a[i], b1, acc[i][1]); }
        }
        GroupMemoryBarrierWithGroupSync();
    }
    [unroll] for (uint i = 0; i < 8; ++i) {
        uint row = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
        storeC4(row, n0 + tx * 4, acc[i][0]);
        storeC4(row, n0 + 64 + tx * 4, acc[i][1]);
    }
}
"""


def vectorized_kernel() -> str:
    body = render_body(Catalog.load(builtin_transformations_dir()).get("vectorized-loads").body, "hlsl")
    (fence,) = [e.code for e in code_examples(body) if e.language == "hlsl"]
    return KERNEL.replace("FENCE", fence)


async def test_vectorized_loads_fence_is_correct_at_sizes_off_the_tile(make_client) -> None:
    """At 192^3 the 128x128 tiles straddle M and N with an aligned pitch: every group takes float4 views, vectors
    past N the scalar path. Generality then samples sizes with N % 4 != 0 (scalar path throughout) and K not a
    multiple of BK. With the store's per-vector bound dropped, a vector past N writes into the next row of C and
    past C's end from its last row: the same run fails. (The load's bound cannot fail this way: a B vector past N
    feeds only columns of C that are never stored; it keeps the read inside the buffer.)"""
    source = vectorized_kernel()
    assert "B4[o / 4]" in source and "C4[o / 4]" in source  # the float4 views are the ones exercised
    unbounded = source.replace("r < p.M && p.N % 4 == 0 && c + 3 < p.N) {", "r < p.M && p.N % 4 == 0) {")
    assert unbounded != source
    async with make_client() as (client, _):
        started = await client.call_tool("start_session", {"backend": "hlsl", "sizes": {"M": 192, "N": 192, "K": 192}})
        assert not started.is_error, started.content[0].text
        sid = started.structured_content["session_id"]
        report = whole_answer("submit_kernel", await client.call_tool("submit_kernel",
                                                                      {"session_id": sid, "source": source}))
        assert report["status"] == "benchmarked", report["message"]
        checked = report["generality"]["sizes_checked"]
        assert report["generality"]["passed"] and any(s["N"] % 4 and s["K"] % 8 for s in checked), report["generality"]
        report = whole_answer("submit_kernel", await client.call_tool("submit_kernel",
                                                                      {"session_id": sid, "source": unbounded}))
        assert report["status"] == "failed" and report["failure"] == "out_of_bounds_write", report["message"]
