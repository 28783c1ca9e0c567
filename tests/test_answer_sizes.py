"""Issue 34, what an agent pays for: each long part of an answer (a transformation's text, a diff, a kernel's
source, the session's ABI and rules) is received once in each view, the text and the structured content (a host gives
its model one of them: Claude Code and VS Code the structured content, Claude Desktop the text);
list_problems is a summary whose size does not grow with the ABIs, and list_problems(problem=...) gives one problem's
ABI for every backend and dtype. Through a real in-process MCP client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from peak_mcp.api.responses import whole_answer
from peak_mcp.catalog.transformations import Catalog, builtin_transformations_dir

pytestmark = pytest.mark.anyio
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "matmul" / "cuda"
SMALL = {"M": 64, "N": 48, "K": 32}


def received(answer: Any) -> tuple[str, str]:
    """What a client receives: the text blocks, and the structured content as JSON (strings escaped as sent)."""
    text = "".join(getattr(c, "text", "") or "" for c in answer.content)
    return text, json.dumps(answer.structured_content, ensure_ascii=False)


def once(part: str, answer: Any) -> None:
    text, structured = received(answer)
    assert len(part) > 200, "a long part"
    assert text.count(part) == 1, "the long part, whole, once in the text"
    assert structured.count(json.dumps(part, ensure_ascii=False)[1:-1]) == 1, "and once in the structured content"


async def test_list_problems_is_a_summary_without_abis(make_client) -> None:
    """25K for 7 problems, 22.7K of it structured ABIs, growing with every problem: now a line a problem."""
    async with make_client() as (client, _):
        answer = await client.call_tool("list_problems", {})
    assert not answer.is_error, answer.content[0].text
    text, structured = received(answer)
    problems = answer.structured_content["problems"]
    assert len(problems) >= 7
    for needle in ('extern "C"', "vk::binding", "poisoned", "<hip/hip_runtime.h>"):
        assert needle not in text and needle not in structured, needle
    for p in problems:  # what a summary keeps
        assert p["sizes"] and p["default_sizes"] and p["dtypes_by_backend"] and p["title"], p["name"]
        assert "abi" not in p and "definition" not in p
    assert "list_problems(problem=NAME)" in text and text.count("list_problems(problem=NAME)") == 1
    # a bound per problem: its line and record, not its ABIs (matmul's alone are 4K for its 8 backend-dtypes)
    assert len(text.encode()) + len(structured.encode()) < 900 * len(problems) + 400, (len(text), len(structured))


async def test_one_problem_gives_its_abi_for_every_backend_and_dtype(make_client) -> None:
    async with make_client() as (client, _):
        answer = await client.call_tool("list_problems", {"problem": "matmul"})
        missing = await client.call_tool("list_problems", {"problem": "no_such_problem"})
    assert missing.is_error and "matmul" in missing.content[0].text  # it names the problems there are
    matmul = whole_answer("list_problems", answer)["problems"][0]
    abis = {b: {matmul["dtypes_by_backend"][b][0]: text, **matmul.get("abi_by_dtype", {}).get(b, {})}
            for b, text in matmul["abi"].items()}
    assert {b: sorted(a) for b, a in abis.items()} == {b: sorted(d) for b, d in matmul["dtypes_by_backend"].items()}
    assert "const float* A" in abis["cuda"]["f32"] and "const __half* A" in abis["cuda"]["f16"]
    assert "const __nv_bfloat16* A" in abis["cuda"]["bf16"] and "const hip_bfloat16* A" in abis["hip"]["bf16"]
    assert "A (half)" in abis["hlsl"]["f16"] and "A (float)" in abis["hlsl"]["f32"]
    for backend, by_dtype in abis.items():
        for dtype, abi in by_dtype.items():
            # once under its header (HIP's ABI holds CUDA's, so a plain count would find CUDA's twice)
            text, structured = received(answer)
            assert text.count(f"\n\nABI {backend} {dtype}:\n{abi}") == 1
            assert json.dumps(abi, ensure_ascii=False)[1:-1] in structured  # the record holds it too


async def test_a_transformation_text_is_received_once(make_client) -> None:
    catalog = Catalog.load(builtin_transformations_dir())
    longest = max(catalog.list(), key=lambda t: len(t.body))
    async with make_client() as (client, _):
        answer = await client.call_tool("get_transformation", {"transformation": longest.id})
    assert not answer.is_error, answer.content[0].text
    once(longest.body, answer)
    assert answer.structured_content["body"] == longest.body
    assert whole_answer("get_transformation", answer)["body"] == longest.body


async def test_a_diff_a_source_and_the_session_rules_are_received_once(make_client) -> None:
    async with make_client() as (client, _):
        started = await client.call_tool("start_session", {"backend": "cuda", "sizes": SMALL})
        assert not started.is_error, started.content[0].text
        sid = started.structured_content["session_id"]
        session = whole_answer("start_session", started)
        once(session["rules"], started)
        once(session["abi"], started)
        source = (EXAMPLES / "regblock_2d.cu").read_text()
        submitted = await client.call_tool("submit_kernel", {"session_id": sid, "source": source})
        assert not submitted.is_error, submitted.content[0].text
        version = await client.call_tool("get_version", {"session_id": sid, "version": 1})
        diff = await client.call_tool("diff", {"session_id": sid, "a": 0, "b": 1})
    once(source, version)
    assert whole_answer("get_version", version)["source"] == source
    text = whole_answer("diff", diff)["diff"]
    assert text.startswith("--- v0") and "matmul_rb2d" in text
    once(text, diff)
    assert diff.content[0].text.startswith("diff v0 -> v1: ")
