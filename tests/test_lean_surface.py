"""Issue 20's friction, through a real in-process MCP client: argument mistakes answered in words, compile failures
said once (no NULs), glslang diagnostics with the source line, a renamed HLSL entry named right, counters said
unavailable for the real reason, the NaN poison explained to a kernel that accumulates into its output, and
suggest_next noticing a coalesced v0 and a transposed A tile."""

from __future__ import annotations

import pytest

from peak_mcp.api.responses import whole_answer
from peak_mcp.api.tools.arguments import closest
from peak_mcp.evaluation.phases import CompileInfo
from peak_mcp.store.reports import compile_failure
from tests.conftest import EXAMPLES, has_device, skip_reason

pytestmark = pytest.mark.anyio
SMALL = {"M": 64, "N": 48, "K": 32}
HLSL_SIZES = {"M": 70, "N": 45, "K": 33}
CUDA_SYNTAX_ERROR = """// peak: entry=k grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
extern "C" __global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {
    int r = blockIdx.y * 16 + threadIdx.y;
    C[r] = undeclared_name;
}
"""


async def _start(client, backend: str = "cuda", sizes=SMALL) -> str:
    started = await client.call_tool("start_session", {"backend": backend, "sizes": sizes})
    assert not started.is_error, started.content[0].text
    return started.structured_content["session_id"]


async def _submit(client, sid: str, source: str) -> dict:
    result = await client.call_tool("submit_kernel", {"session_id": sid, "source": source})
    assert not result.is_error, result.content[0].text
    return whole_answer("submit_kernel", result)  # its compile log: in the text


# (e) unknown argument names -------------------------------------------------------------------------------------
async def test_unknown_argument_names_are_answered_with_the_right_ones(make_client) -> None:
    async with make_client() as (client, _):
        sid = await _start(client)
        wrong = await client.call_tool("submit_kernel", {"sessionId": sid, "code": "x"})
        text = wrong.content[0].text
        assert wrong.is_error
        assert "unknown argument 'sessionId' (did you mean 'session_id'?)" in text
        assert "unknown argument 'code' (did you mean 'source'?)" in text
        assert "submit_kernel takes: session_id (required), source (required), parent" in text
        assert "Field required" not in text and "errors.pydantic.dev" not in text and "input_value" not in text
        # A typo in an optional argument is no longer ignored in silence.
        typo = await client.call_tool("validate", {"session_id": sid, "trails": 3})
        assert typo.is_error and "unknown argument 'trails' (did you mean 'trials'?)" in typo.content[0].text
        missing = await client.call_tool("get_version", {})
        assert missing.is_error and "missing required argument 'session_id'" in missing.content[0].text
        # A wrong value reads `argument: what is wrong`, without pydantic's URL or the value echoed.
        bad = await client.call_tool("history", {"session_id": sid, "chart": "sometimes"})
        assert bad.is_error and "chart: " in bad.content[0].text and "errors.pydantic.dev" not in bad.content[0].text


def test_closest_argument_names() -> None:
    expected = ["session_id", "source", "parent", "transformation", "require_generality"]
    assert closest("sessionId", expected) == "session_id" and closest("code", expected) == "source"
    assert closest("Source", expected) == "source" and closest("transfromation", expected) == "transformation"
    assert closest("zzz", expected) is None


# (c) compile logs: no NUL, said once ----------------------------------------------------------------------------
def test_compile_logs_lose_their_nul_characters() -> None:
    assert CompileInfo(ok=False, log="kernel.cu(4): error: x\n\x00\x00").log == "kernel.cu(4): error: x"
    assert compile_failure("warning: w\nkernel.cu(4): error: x\n\x00") == (
        "compilation failed: kernel.cu(4): error: x; compile.log has all 2 lines")
    assert compile_failure("") == "compilation failed (the compiler printed nothing)"


async def test_a_compile_error_is_told_once_per_answer(make_client) -> None:
    async with make_client() as (client, _):
        sid = await _start(client)
        answer = await client.call_tool("submit_kernel", {"session_id": sid, "source": CUDA_SYNTAX_ERROR})
        report = whole_answer("submit_kernel", answer)  # the log once in the record, once in the text
        assert report["status"] == "compile_error"
        assert answer.content[0].text.count("undeclared_name") == report["compile"]["log"].count(
            "undeclared_name") + 1  # the log once, and the message's one-line summary
        assert report["message"].startswith("compilation failed: kernel.cu(4): error: identifier")
        assert "\n" not in report["message"] and "\x00" not in answer.content[0].text


# (b) profile counters --------------------------------------------------------------------------------------------
async def test_profile_says_why_counters_are_unavailable(make_client) -> None:
    async with make_client() as (client, service):
        sid = await _start(client)
        if service.store.session(sid).runs:
            pytest.skip("this machine has a CUDA GPU; the compile-only answer is what is tested")
        asked = (await client.call_tool("profile", {"session_id": sid})).structured_content
        assert "not asked for" not in asked["counters"]["why"]
        assert "needs a GPU, and this session has none" in asked["counters"]["why"]
        declined = (await client.call_tool("profile", {"session_id": sid, "counters": False})).structured_content
        assert "not asked for (counters=false)" in declined["counters"]["why"]


# (g) suggest_next reads the source ----------------------------------------------------------------------------
async def test_suggest_next_notices_a_coalesced_v0_and_a_transposed_a_tile(make_client) -> None:
    async with make_client() as (client, service):
        sid = await _start(client)
        first = (await client.call_tool("suggest_next", {"session_id": sid, "limit": 25})).structured_content
        assert "coalesced (x threads along n)" in first["features"]
        assert "coalesced-access" not in [s["id"] for s in first["suggestions"]]
        report = await _submit(client, sid, (EXAMPLES / "cuda" / "regblock_2d.cu").read_text())
        if not service.store.session(sid).runs:  # compiled only: head stays on v0; suggest as if v1 had run
            assert report["head"] == 0, report
            service.store.set_head(sid, 1)
        second = (await client.call_tool("suggest_next", {"session_id": sid, "limit": 25})).structured_content
        assert "A tile stored k-major (transposed)" in second["features"]
        assert "transpose-a-tile-in-shared" not in [s["id"] for s in second["suggestions"]]


def test_an_uncoalesced_kernel_and_an_m_major_tile_are_not_taken_for_done() -> None:
    from peak_mcp.catalog.suggest import source_features

    rows_on_x = ("int row = blockIdx.x * blockDim.x + threadIdx.x; int col = blockIdx.y * 16 + threadIdx.y;\n"
                 "C[row * N + col] = acc;")
    assert "coalesced (x threads along n)" not in source_features(rows_on_x)
    assert "A tile stored k-major (transposed)" not in source_features("__shared__ float As[BM][BK];")
    assert "A tile stored k-major (transposed)" in source_features("groupshared float4 As[BK][BM / 4];")


# HLSL on a Vulkan device: (a), (d), (f) -------------------------------------------------------------------------
@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
async def test_hlsl_entry_rename_syntax_error_and_accumulation(make_client) -> None:
    naive = (EXAMPLES / "hlsl" / "naive.hlsl").read_text()
    async with make_client() as (client, _):
        sid = await _start(client, "hlsl", HLSL_SIZES)
        # (a) the function renamed, the peak: line not: the message names the function there is.
        renamed = await _submit(client, sid, naive.replace("void main(", "void gemm("))
        assert renamed["status"] == "compile_error"
        assert "entry 'main' named on the peak: line is not a [numthreads(...)] function" in renamed["message"]
        assert "gemm" in renamed["message"] and "found ['main']" not in renamed["compile"]["log"]
        # (d) glslang's diagnostics quote the kernel's line, once per run of diagnostics about it, with a caret.
        broken = naive.replace("acc += ", "acc += undefined_name + ")
        report = await _submit(client, sid, broken)
        log = report["compile"]["log"]
        line = next(text for text in broken.splitlines() if "undefined_name" in text)
        assert f"'undefined_name' : unknown variable\n    {line}\n" in log
        assert log.count(line) <= 2 and "^" in log
        # (f) a kernel that adds into C reads the NaN poison back everywhere: it is told outputs start as NaN.
        accumulating = await _submit(client, sid, naive.replace("C[row * p.N + col] = acc;",
                                                                 "C[row * p.N + col] += acc;"))
        assert accumulating["status"] == "failed", accumulating
        assert "outputs start as NaN, not zero" in accumulating["message"]
        assert "C[i] = acc" in accumulating["message"]


# Hints in a row problem's session name its own symbols, and docs that exist ---------------------------------------
@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
async def test_hints_in_a_rows_session_name_rows_and_cols_not_matmul(make_client) -> None:
    """A tune on v0 of a ROWS/COLS session said "see design.md, Tuning parameters" (no such file) with examples
    `BM=[64, 128] BK=[8, 16]`, and a kernel without its peak: line was shown `groups=(cdiv(N, 16), cdiv(M, 16), 1)`."""
    from pathlib import Path

    async with make_client() as (client, _):
        started = await client.call_tool("start_session", {"problem": "softmax", "backend": "hlsl",
                                                           "sizes": {"ROWS": 16, "COLS": 100}})
        sid = started.structured_content["session_id"]
        tuned = await client.call_tool("tune", {"session_id": sid, "version": 0})
        text = tuned.content[0].text
        assert tuned.is_error and "no tuning parameters" in text
        assert "design.md" not in text and "BM=" not in text and "BK=" not in text
        assert "groups=(cdiv(ROWS, BLOCK), 1, 1)" in text and "README.md, section Tuning parameters" in text
        readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
        assert "### Tuning parameters" in readme and "// peak: params" in readme.split("### Tuning parameters")[1]
        source = (EXAMPLES.parent / "softmax" / "hlsl" / "1_groupshared.hlsl").read_text()
        unannotated = "\n".join(line for line in source.splitlines() if "peak:" not in line)
        report = await _submit(client, sid, unannotated)
        assert report["status"] == "invalid_annotation" and "cdiv(ROWS, 256)" in report["message"], report["message"]
        assert "cdiv(N" not in report["message"] and "cdiv(M" not in report["message"]


def test_launch_examples_follow_the_problem_symbols() -> None:
    from peak_mcp.core.errors import AnnotationError
    from peak_mcp.core.launch import parse_annotation

    for symbols, needs, expected, absent in (
            (("M", "N", "K"), ("entry", "grid", "block"), "grid=(cdiv(N, 16), cdiv(M, 16), 1)", "ROWS"),
            (("ROWS", "COLS"), ("entry", "grid", "block"), "grid=(cdiv(ROWS, 256), 1, 1) block=(256, 1, 1)", "cdiv(N"),
            (("ROWS", "COLS"), ("entry", "groups"), "groups=(cdiv(ROWS, 256), 1, 1)", "cdiv(M")):
        with pytest.raises(AnnotationError) as raised:
            parse_annotation("void k() {}", needs=needs, symbols=symbols)
        said = f"{raised.value} {raised.value.hint}"
        assert expected in said and absent not in said, said
    with pytest.raises(AnnotationError) as raised:
        parse_annotation("// peak: entry=k grid=(ROWS, 1, 1) block=(32, 1, 1)\n// peak: params 1X=[2]",
                         needs=("entry", "grid", "block"), symbols=("ROWS", "COLS"))
    assert "BM=" not in f"{raised.value} {raised.value.hint}"
