"""What an agent reads: lean results, schemas with enums and hints, sizes written the way prompts write them."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from peak_mcp.api.responses import rounded, whole_answer
from peak_mcp.core.errors import InvalidInput
from peak_mcp.core.units import rate
from peak_mcp.problems.matmul import Matmul

pytestmark = pytest.mark.anyio
SMALL = {"M": 64, "N": 48, "K": 32}


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e30, max_value=1e30))
def test_rounding_keeps_four_significant_digits(x: float) -> None:
    r = rounded(x)
    assert r == 0 if x == 0 else abs(r - x) <= abs(x) * 5e-4
    assert len(repr(abs(r)).replace(".", "").lstrip("0").split("e")[0].rstrip("0")) <= 4


def test_instants_keep_their_seconds() -> None:
    """A record's Unix time is an instant, not a measurement: 4 digits put a tune's `at` 15 hours off (agent46)."""
    got = rounded({"at": 1795946404.37, "tuning": {"at": 1795946404.37, "median_ms": 1.23456}, "created_at": 17e8})
    assert got == {"at": 1795946404, "tuning": {"at": 1795946404, "median_ms": 1.235}, "created_at": 1700000000}


def test_rates_read_in_the_unit_that_fits() -> None:
    assert rate(43.4) == "43.4 TFLOP/s" and rate(0.5) == "500 GFLOP/s" and rate(6.33e-5) == "63.3 MFLOP/s"
    assert rate(None) == "n/a"


@pytest.mark.parametrize(("text", "sizes"), [("M=128,N=64,K=32", {"M": 128, "N": 64, "K": 32}),
                                             ("M=128 N=64", {"M": 128, "N": 64}),
                                             ("128x64x32", {"M": 128, "N": 64, "K": 32})])
def test_sizes_as_prompts_write_them(text: str, sizes: dict) -> None:
    assert Matmul().parse_sizes(text) == sizes


@pytest.mark.parametrize("text", ["M=big", "128x64", "M"])
def test_unreadable_sizes_say_how_to_write_them(text: str) -> None:
    with pytest.raises(InvalidInput, match="M=4096,N=4096,K=4096"):
        Matmul().parse_sizes(text)


async def test_tools_carry_hints_and_enums(make_client) -> None:
    async with make_client() as (client, _):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["history"].annotations.read_only_hint is True
        assert tools["submit_kernel"].annotations.read_only_hint is False
        assert tools["submit_kernel"].annotations.destructive_hint is False
        assert tools["revert"].annotations.idempotent_hint is True
        props = tools["start_session"].input_schema["properties"]
        assert set(props["backend"]["enum"]) == {"cuda", "hip", "hlsl"}
        assert props["dtype"]["enum"] == ["f32", "f16", "bf16"]
        undocumented = [(name, p) for name, t in tools.items() for p, s in t.input_schema["properties"].items()
                        if "description" not in s]
        assert undocumented == []


async def test_results_are_lean_and_valid(make_client) -> None:
    async with make_client() as (client, _):
        started = await client.call_tool("start_session", {"backend": "cuda", "sizes": "M=64,N=48"})
        assert not started.is_error, started.content[0].text
        info = started.structured_content
        assert info["sizes"] == {"M": 64, "N": 48, "K": 4096}
        assert "K=4096" in info["note"]  # partial sizes are filled, and the answer says so
        assert "max_compute_workgroup_count" not in info["device"]  # the device in brief
        text = started.content[0].text  # a summary of the record, not the same JSON again
        # a summary, then the session's ABI and rules whole (an agent writes its kernel from them): once in the
        # text, and in the record (a host gives its model one of the two)
        assert info["abi"] and info["rules"] and "abi_chars" not in info
        assert not text.startswith("{") and text.count(info["abi"]) == 1 and text.count(info["rules"]) == 1
        summary = text.split("\n\n", 1)[0]  # the long parts follow it, each after a blank line and its header
        assert "\n\nABI (cuda, f32):\n" in text and len(summary) < len(json.dumps(info, separators=(",", ":")))
        assert text.startswith(f"session {info['session_id']}: matmul f32 M=64,N=48,K=4096 on ")
        assert f"v0 {info['version_0']['status']} [naive]" in text and "message: " in text and "head v0" in text
        listed = (await client.call_tool("list_sessions", {"limit": 1})).structured_content
        assert listed["total"] == 1 and len(listed["sessions"]) == 1 and "device" in listed["sessions"][0]
        empty = (await client.call_tool("list_sessions", {"offset": 5})).structured_content
        assert empty["sessions"] == [] and empty["total"] == 1


async def test_schemas_carry_no_titles_and_stay_small(make_client) -> None:
    async with make_client() as (client, _):
        tools = (await client.list_tools()).tools
        listed = json.dumps([t.model_dump(mode="json", exclude_none=True, by_alias=True) for t in tools])
        assert '"title": "' not in listed  # pydantic's respelled property names, dropped
        assert '"anyOf"' not in listed and '"default": null' not in listed  # optional arguments read plainly
        assert all("\n" not in t.description and "  " not in t.description for t in tools)  # no docstring indent
        assert len(listed) <= 16_000, len(listed)  # issue 20's bar; 18 tools; each added tool must earn its schema
        # Output schemas are served as a resource, not in tools/list; every answer is still checked against them.
        assert all(t.output_schema is None for t in tools)
        schemas = json.loads((await client.read_resource("peak://output-schemas")).contents[0].text)
        assert {"start_session", "submit_kernel", "get_transformation"} <= set(schemas)
        assert "status" in json.dumps(schemas["submit_kernel"])
        assert '"title": {' in json.dumps(schemas)  # a property named title (catalog models) is kept
        started = await client.call_tool("list_problems", {})
        assert started.structured_content["problems"]  # structured content still comes without an advertised schema


async def test_answers_carry_the_record_once_with_a_summary_as_text(make_client) -> None:
    """Each answer carried its JSON twice (text and structuredContent). The text is a summary now, with the facts a
    client that reads only text needs: status, check, message, times, head and best; and whole where the text is
    the point (a compile log, a source, a brief)."""
    async with make_client() as (client, _):
        sid = (await client.call_tool("start_session", {"backend": "cuda", "sizes": SMALL})).structured_content[
            "session_id"]
        broken = await client.call_tool("submit_kernel", {"session_id": sid, "source": BROKEN})
        report = broken.structured_content
        text = broken.content[0].text
        assert text.startswith(f"v1 compile_error (compile) [parent v0, submit]\nmessage: {report['message']}\n")
        log = whole_answer("submit_kernel", broken)["compile"]["log"]
        assert text.endswith(f"head and best move only to versions validated and timed\n\ncompile log:\n{log}")
        detail = await client.call_tool("get_version", {"session_id": sid, "version": 1})
        assert detail.content[0].text.endswith(f"source:\n{BROKEN}") and detail.structured_content["source"] == BROKEN
        for tool, args in (("list_sessions", {}), ("history", {"session_id": sid}), ("doctor", {}),
                           ("suggest_next", {"session_id": sid}), ("get_transformation_stats", {}),
                           ("profile", {"session_id": sid, "version": 0}),
                           ("apply_transformation", {"session_id": sid, "transformation": "shared-memory-tiling"})):
            answer = await client.call_tool(tool, args)
            assert not answer.is_error, answer.content[0].text
            assert not answer.content[0].text.lstrip().startswith("{"), (tool, answer.content[0].text[:200])
            assert answer.structured_content, tool
        step, text = answer.structured_content, answer.content[0].text
        brief = text.split("\nbrief:\n", 1)[1]  # a client that cannot sample needs it whole, in the text
        assert brief.startswith("# Task: apply the transformation `shared-memory-tiling`")
        # ... once there, and once in the record: Claude Code and VS Code give their model only the record
        assert text.count(brief) == 1 and step["brief"] == brief


BROKEN = """// peak: entry=k grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
extern "C" __global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {
    C[0] = undeclared_name;
}
"""


@pytest.mark.vulkan
async def test_a_long_history_with_its_chart_stays_small(make_client) -> None:
    """history(chart=true) was 97 KB in an agent's session (300 KB at 50 versions, a chart 1760 px wide). At 50
    versions it now stays near 20 KB: the chart is capped (size, labels, palette), the table in the text keeps 20
    rows, and the structured rows leave out empty fields."""
    from tests.conftest import EXAMPLES, has_device

    if not has_device("hlsl"):
        pytest.skip("no Vulkan device")
    async with make_client() as (client, service):
        sid = (await client.call_tool("start_session", {"backend": "hlsl", "sizes": {"M": 32, "N": 32, "K": 32}})
               ).structured_content["session_id"]
        await client.call_tool("submit_kernel", {"session_id": sid, "source": (
            EXAMPLES / "hlsl" / "tiled_groupshared.hlsl").read_text()})
        store = service.store
        model = store.version(sid, 1)
        columns = model.model_dump(mode="json", include={"status", "message", "compile", "validation", "timing",
                                                          "generality"})
        last = 1
        while last < 49:  # copies of v1's record, each the child of the one before
            last = store.add_version(sid, parent=last, origin="submit", transformation="shared-memory-tiling",
                                     source=model.source, **columns)
        store.set_head(sid, last)
        history = await client.call_tool("history", {"session_id": sid, "chart": True})
        text, image = history.content[0].text, history.content[1].data
        structured = json.dumps(history.structured_content, separators=(",", ":"))
        assert len(history.structured_content["rows"]) == 50 and "table" not in history.structured_content
        assert text.count("\n| ") == 21 and "| 49 (head) | 48 |" in text  # a header and 20 rows
        assert re.search(r"\n\(30 more versions, of v\d+ to v\d+, are in the structured rows", text), text
        assert len(image) < 10_000, len(image)
        assert len(text) + len(image) + len(structured) < 25_000, (len(text), len(image), len(structured))


def test_speed_reads_memory_bound_work_by_its_bandwidth_and_compute_bound_by_its_flop_rate() -> None:
    from peak_mcp.core.units import speed

    assert speed(1.9, 3011.4) == "3,011 GB/s"  # 0.63 flops a byte: softmax
    assert speed(50.0, 200.0) == "50 TFLOP/s"  # 250 flops a byte: matmul
    assert speed(None, 12.5) == "12.5 GB/s" and speed(0.0, 12.5) == "12.5 GB/s"  # no flops declared
    assert speed(0.002, None) == "2 GFLOP/s" and speed(None, None) == ""


async def test_list_problems_text_is_one_line_a_problem(make_client) -> None:
    """list_problems' text repeated every problem's ABI for every backend (~15,000 characters, "Outputs are poisoned"
    fifteen times). The text now has one line a problem and says where the ABIs are: list_problems(problem=...)."""
    async with make_client() as (client, _):
        answer = await client.call_tool("list_problems", {})
        text, problems = answer.content[0].text, answer.structured_content["problems"]
        assert len(text) < 400 * len(problems) + 300, len(text)
        assert "poisoned" not in text and "extern \"C\"" not in text and "vk::binding" not in text
        assert "every backend and dtype: list_problems(problem=NAME); start_session gives the session's own." in text
        for p in problems:
            line = next(line for line in text.splitlines() if line.startswith(f"{p['name']}: "))
            assert f"sizes {', '.join(p['sizes'])}" in line and "dtypes by backend: " in line
            assert "abi" not in p and "abi_chars" not in p


@pytest.mark.vulkan
async def test_a_failing_verdict_gives_its_tolerance_once(make_client) -> None:
    """A failing verdict's bound and formula were said in the report's message and again in its validation record;
    a passing one's too. Each is said once in the text and once in the structured content."""
    from tests.conftest import EXAMPLES, has_device

    if not has_device("hlsl"):
        pytest.skip("no Vulkan device")
    async with make_client() as (client, _):
        started = await client.call_tool("start_session", {"problem": "softmax", "backend": "hlsl",
                                                           "sizes": {"ROWS": 16, "COLS": 100}})
        assert not started.is_error, started.content[0].text
        v0 = started.structured_content["version_0"]
        assert v0["status"] == "benchmarked" and json.dumps(v0).count("lp being") == 1, v0
        source = (EXAMPLES.parent / "softmax" / "hlsl" / "1_groupshared.hlsl").read_text()
        wrong = source.replace("* inv)", "* inv * 1.001)")
        assert wrong != source
        answer = await client.call_tool("submit_kernel", {"session_id": started.structured_content["session_id"],
                                                          "source": wrong})
        report, text = answer.structured_content, answer.content[0].text
        assert report["failure"] == "wrong_result" and "elements over their bound (2 × (|lp − ref|" in text
        assert text.count("lp being the reference") == 1 and json.dumps(report).count("lp being the reference") == 1
        assert "message" not in report["validation"] and report["validation"]["max_error_over_bound"] > 1


def test_the_lp_bound_without_an_error_scale_names_its_scale_once() -> None:
    from peak_mcp.problems.base import Tolerance

    plain = Tolerance(rel_l2=1e-6, roundoff=2.0**-24, factor=2, floor=4, with_lp=True,
                      scale_words="max(|ref|, rms(ref))").describe()
    assert plain.count("max(|ref|, rms(ref))") == 1 and "(u_out + u_f32) × max(|ref|, rms(ref))" in plain
    scaled = Tolerance(rel_l2=1e-6, roundoff=2.0**-24, factor=2, floor=4, with_lp=True,
                       scale_words="the problem's error scale").describe()
    assert "u_out × max(|ref|, rms(ref)) + u_f32 × the problem's error scale" in scaled
    # each term said (agent 47: u_out and u_f32 were never defined)
    assert scaled.endswith("u_out and u_f32 the unit roundoffs of the output's type and of float32"), scaled


def test_counts_in_answers_agree_with_their_noun() -> None:
    """Agent 47: list_sessions said "1 versions"."""
    from peak_mcp.api.summaries import session_list

    one = session_list({"total": 1, "offset": 0, "sessions": [
        {"session_id": "abc", "problem": "rmsnorm", "backend": "hlsl", "dtype": "f32", "sizes": {"ROWS": 8},
         "device": "lavapipe", "versions": 1, "head": 0, "best": 0}]})
    assert one[0].startswith("1 session;") and "; 1 version, head v0" in one[1], one
    many = session_list({"total": 2, "offset": 0, "sessions": []})
    assert many[0].startswith("2 sessions;")


def test_the_traits_origin_says_which_reason_holds() -> None:
    """Agent 47: "guessed ... (no Python reference to probe, or the probe showed nothing)" for a file with one."""
    from peak_mcp.api.summaries import problems

    base = {"name": "row_l2", "title": "t", "sizes": ["ROWS"], "dtypes": ["f32"], "backends": ["hlsl"],
            "traits": ["row_reduction"], "traits_guessed": True}
    with_reference = problems({"problems": [base]})[0]
    assert "the probe of its Python reference" in with_reference and " or " not in with_reference.split("(")[1]
    without = problems({"problems": [{**base, "reference": "the session's reference kernel"}]})[0]
    assert "has no Python reference to probe" in without
