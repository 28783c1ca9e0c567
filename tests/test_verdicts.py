"""Verdicts a hostile or careless kernel cannot walk through, through a real MCP client on a real Vulkan device
(lavapipe in CI). Each kernel here passed on the validator before guards stood on both sides, the bound followed
the error scale, the timed loop rotated input sets and generality was checked."""

from __future__ import annotations

import pytest

from peak_mcp.evaluation.workspace import FRONT_GUARD_BYTES, Workspace
from peak_mcp.runner import vulkan_sanitizer
from tests.conftest import EXAMPLES, has_device, skip_reason
from tests.hostile.harness import HOSTILE

pytestmark = [pytest.mark.vulkan, pytest.mark.anyio]
if not has_device("hlsl"):
    pytestmark.append(pytest.mark.skip(reason=f"no Vulkan device: {skip_reason('hlsl')}"))

NAIVE = (EXAMPLES / "hlsl" / "naive.hlsl").read_text()
STORE = "C[row * p.N + col] = acc;"


def _naive_with(old: str, new: str) -> str:
    assert old in NAIVE, old
    return NAIVE.replace(old, new)


# Correct except for one flaw each; every one was recorded as passing before.
FLAWED = {
    # one element 1e-3 off: ~1000x a correct kernel's error at these sizes
    "wrong_result": _naive_with(STORE, "C[row * p.N + col] = acc + ((row == 5 && col == 7) ? 1e-3 : 0.0);"),
    # a write 1.2 MB past the end of C, well beyond a 4 KiB guard
    "out_of_bounds_write": _naive_with(STORE, STORE + "\n    if (row == 0 && col == 0) C[p.M * p.N + 300000] = 1.0;"),
    # reads one element past the end of a row of A and of B
    "out_of_bounds_read": _naive_with("k < p.K", "k <= p.K"),
}

# A 16x16-tiled kernel without edge guards: right at tile multiples, wrong elsewhere (edges unwritten, the K tail
# dropped), yet never outside its buffers: a read past them would fail it under the validation layer instead.
UNGUARDED = """// peak: entry=main groups=(N // 16, M // 16, 1)
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> A;
[[vk::binding(1)]] StructuredBuffer<float> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;
groupshared float As[16][16];
groupshared float Bs[16][16];

[numthreads(16, 16, 1)]
void main(uint3 id : SV_DispatchThreadID, uint3 t : SV_GroupThreadID)
{
    float acc = 0.0;
    for (uint k0 = 0; k0 + 16 <= p.K; k0 += 16) {
        As[t.y][t.x] = A[id.y * p.K + k0 + t.x];
        Bs[t.y][t.x] = B[(k0 + t.y) * p.N + id.x];
        GroupMemoryBarrierWithGroupSync();
        for (uint k = 0; k < 16; ++k)
            acc += As[t.y][k] * Bs[k][t.x];
        GroupMemoryBarrierWithGroupSync();
    }
    C[id.y * p.N + id.x] = acc;
}
"""


async def _session(client, sizes: dict[str, int], **extra) -> dict:
    started = await client.call_tool("start_session", {"backend": "hlsl", "sizes": sizes, **extra})
    assert not started.is_error, started.content[0].text
    return started.structured_content


async def _submit(client, session_id: str, source: str, **extra) -> dict:
    result = await client.call_tool("submit_kernel", {"session_id": session_id, "source": source, **extra})
    assert not result.is_error, result.content[0].text
    return result.structured_content


@pytest.mark.parametrize("sizes", [{"M": 128, "N": 128, "K": 128}, {"M": 100, "N": 77, "K": 53}])
async def test_each_flaw_is_named(make_client, sizes: dict[str, int]) -> None:
    async with make_client() as (client, _):
        session = await _session(client, sizes)
        for check, source in FLAWED.items():
            report = await _submit(client, session["session_id"], source)
            assert (report["status"], report["failure"]) == ("failed", check), (check, report["message"])
            assert report["message"]
        head = (await client.call_tool("history", {"session_id": session["session_id"]})).structured_content["head"]
        assert head == 0  # nothing flawed became head


async def test_a_kernel_that_only_works_at_tile_multiples_is_not_general(make_client) -> None:
    async with make_client() as (client, _):
        session = await _session(client, {"M": 128, "N": 128, "K": 128})
        report = await _submit(client, session["session_id"], UNGUARDED)
        # right at the session's sizes (timed), wrong elsewhere: not a success
        assert report["status"] == "not_general" and report["performance"]["median_ms"] > 0, report["message"]
        generality = report["generality"]
        assert generality["passed"] is False and generality["failures"], generality
        failed_at = [f["sizes"] for f in generality["failures"]]
        assert {"M": 100, "N": 77, "K": 53} in failed_at, failed_at
        assert report["head"] == 0  # head stays on the general version

        refused = await client.call_tool("revert", {"session_id": session["session_id"], "version": report["version"]})
        assert refused.is_error and "generality" in refused.content[0].text

        # The agent may accept a specialized kernel explicitly.
        kept = await _submit(client, session["session_id"], UNGUARDED, require_generality=False)
        assert kept["head"] == kept["version"] and kept["generality"]["passed"] is False
        back = await client.call_tool("revert", {"session_id": session["session_id"], "version": report["version"],
                                                 "require_generality": False})
        assert not back.is_error and back.structured_content["head"] == report["version"]


def _rows_below(bits: int) -> str:
    """The naive shader with (row, col) packed into one word as `bits` + (32 - bits) bits: exact up to 2**bits
    rows, wrong past them."""
    return _naive_with("uint row = id.y, col = id.x;",
                       f"uint packed = (id.y << {32 - bits}) | id.x;\n"
                       f"    uint row = packed >> {32 - bits}, col = packed & {(1 << (32 - bits)) - 1}u;")


@pytest.mark.parametrize(("sizes", "bits", "above"), [({"M": 96, "N": 80, "K": 72}, 11, 4101),
                                                      ({"M": 2500, "N": 40, "K": 24}, 13, 16389)])
async def test_a_kernel_wrong_only_above_the_sessions_rows_is_not_general(make_client, sizes, bits, above) -> None:
    """Exact at the session's sizes and every awkward size below them; wrong past 2**bits rows: a sampled size
    above the session's (at least 4x it, at least 4096) sees it."""
    async with make_client() as (client, _):
        session = await _session(client, sizes)
        report = await _submit(client, session["session_id"], _rows_below(bits))
        assert report["status"] == "not_general", report["message"]
        failed_at = [f["sizes"] for f in report["generality"]["failures"]]
        assert failed_at == [{"M": above, "N": 33, "K": 19}], failed_at
        assert f"M={above}" in report["message"] or str(above) in report["message"], report["message"]
        assert report["head"] == 0


@pytest.mark.skipif(vulkan_sanitizer.layer_manifest() is None, reason="no Vulkan validation layer "
                    "(apt-get install vulkan-validationlayers)")
async def test_a_read_past_a_buffer_masked_afterwards_fails_under_the_validation_layer(make_client) -> None:
    """Every output exact, so the guards pass it; GPU-assisted validation at a sampled size sees the read past A."""
    source = (HOSTILE / "hlsl" / "oob_read_masked.hlsl").read_text()
    async with make_client() as (client, _):
        session = await _session(client, {"M": 64, "N": 48, "K": 40})
        report = await _submit(client, session["session_id"], source)
        assert (report["status"], report["failure"]) == ("failed", "sanitizer_vulkan_oob"), report["message"]
        assert "out of bounds" in report["message"] and "buffer A" in report["message"], report["message"]
        assert report["head"] == 0
        good = await _submit(client, session["session_id"], NAIVE)
        assert good["status"] == "benchmarked", good["message"]


async def test_declared_constraints_make_a_tile_multiple_kernel_general(make_client) -> None:
    constraints = ["M % 16 == 0", "N % 16 == 0", "K % 16 == 0"]
    async with make_client() as (client, _):
        session = await _session(client, {"M": 128, "N": 128, "K": 128}, constraints=constraints)
        assert session["constraints"] == constraints
        report = await _submit(client, session["session_id"], UNGUARDED)
        generality = report["generality"]
        assert generality["passed"] is True, generality
        assert len(generality["sizes_checked"]) >= 4
        for sizes in generality["sizes_checked"]:
            assert all(v % 16 == 0 for v in sizes.values()), sizes
        assert len({tuple(s.values()) for s in generality["sizes_checked"]}) == len(generality["sizes_checked"])
        assert report["head"] == report["version"]


async def test_sizes_that_break_the_constraints_are_refused(make_client) -> None:
    async with make_client() as (client, _):
        result = await client.call_tool("start_session", {"backend": "hlsl", "sizes": {"M": 100, "N": 64, "K": 64},
                                                          "constraints": ["M % 64 == 0"]})
        assert result.is_error and "do not meet its constraints" in result.content[0].text
        result = await client.call_tool("start_session", {"backend": "hlsl", "sizes": {"M": 64, "N": 64, "K": 64},
                                                          "constraints": ["__import__('os')"]})
        assert result.is_error and "not a condition" in result.content[0].text


async def test_every_example_passes_at_every_sampled_size(make_client) -> None:
    """False failures must be zero: the correct kernels shipped in examples/ pass everywhere."""
    async with make_client() as (client, _):
        session = await _session(client, {"M": 96, "N": 80, "K": 72})
        for path in sorted((EXAMPLES / "hlsl").glob("*.hlsl")):
            report = await _submit(client, session["session_id"], path.read_text())
            assert report["status"] == "benchmarked", (path.name, report["message"])
            assert report["generality"]["passed"], (path.name, report["generality"])
            assert report["head"] == report["version"]
            checked = [s for s in report["generality"]["sizes_checked"] if any(s[k] > session["sizes"][k] for k in s)]
            assert len(checked) >= 3, report["generality"]["sizes_checked"]  # above the session's in each symbol
            if vulkan_sanitizer.layer_manifest() is not None:  # and no access past a buffer at a small size
                assert (report["validation"]["sanitizer"] or {}).get("clean") == ["vulkan_oob"], report["validation"]


async def test_a_hang_at_another_size_fails_the_version(make_client, settings) -> None:
    """Right at 128^3, but at an odd N it never finishes: wrong, not specialized, even when the agent accepts a
    kernel that is not general."""
    settings.vk_fence_timeout_s = 3
    settings.inactivity_timeout_s = 20
    # llvmpipe ends any invocation's loop after ~65535 iterations, so a bare endless loop can finish before the
    # fence timeout on a fast, idle machine; 64 unrolled loads per iteration keep it running far past 3 s there too.
    source = _naive_with(STORE, STORE + "\n    uint i = 0;\n    [loop] while ((p.N & 1) == 1 && A[0] < 1e30) "
                                        "{ i += 1; float s = 0.0; [unroll] for (uint u = 0; u < 64; ++u) "
                                        "s += A[(i + u) % (p.M * p.K)]; C[row * p.N + col] = s + float(i); }")
    async with make_client() as (client, _):
        session = await _session(client, {"M": 128, "N": 128, "K": 128})
        report = await _submit(client, session["session_id"], source, require_generality=False)
        assert (report["status"], report["failure"]) == ("failed", "timeout"), report["message"]
        assert "(generality)" in report["message"] and report["head"] == 0
        good = await _submit(client, session["session_id"], NAIVE)  # the server and a fresh worker carry on
        assert good["status"] == "benchmarked", good["message"]


async def test_constraints_that_leave_nothing_to_sample_say_unchecked(make_client) -> None:
    async with make_client() as (client, _):
        session = await _session(client, {"M": 128, "N": 128, "K": 128}, constraints=["M * N * K == 2097152"])
        report = await _submit(client, session["session_id"], UNGUARDED)
        assert report["generality"]["passed"] is None and "unchecked" in report["generality"]["note"]
        assert report["status"] == "benchmarked" and report["head"] == report["version"]  # the agent declared it


def test_the_host_spot_check_reads_only_what_the_kernel_saw() -> None:
    """After the timed loop the final output is checked at elements drawn from the OS against values the host
    computes from the input buffers themselves; the device-side reference plays no part."""
    import numpy as np

    from peak_mcp.backends.hlsl import open_executor
    from peak_mcp.evaluation.steps import InputSet, _host_spot_check
    from peak_mcp.problems.matmul import Matmul

    problem, sizes = Matmul(), {"M": 40, "N": 24, "K": 16}
    executor = open_executor(0)
    s = InputSet(Workspace(executor, problem, "f32", sizes))
    try:
        inputs = problem.make_inputs(sizes, "f32", 4, np)
        s.ws.load(inputs)
        s.refs = {"C": problem.reference(inputs, sizes, "f32", 0, float("inf"), np)["C"]}
        right = (inputs["A"].reshape(40, 16).astype(np.float64) @ inputs["B"].reshape(16, 24)).astype(np.float32)
        def store(values: np.ndarray) -> None:
            executor.write(s.ws.buffer("C").handle, values.reshape(-1).view(np.uint8), FRONT_GUARD_BYTES)

        store(right)
        assert _host_spot_check(s, problem, "f32") is None
        s.refs["C"].values[:] = 0  # a corrupted device-side reference is not consulted
        assert _host_spot_check(s, problem, "f32") is None
        store(right * np.float32(1.01))
        finding = _host_spot_check(s, problem, "f32")
        assert finding is not None and finding.check == "wrong_result" and "recomputed on the host" in finding.message
    finally:
        s.ws.close()
        executor.close()
