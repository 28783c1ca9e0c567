"""Issue 34 through a real in-process MCP client: stats credit a transformation with its text's own time (never a
later tune's), a declined sampling request ends apply_transformation in a normal answer, and what the tools and
prompts say holds for every problem."""

from __future__ import annotations

import mcp.types as types
import pytest

from tests.conftest import has_device
from tests.test_apply import BROKEN, ScriptedLLM, _start, fenced
from tests.test_tuning import TUNED as PARENT
from tests.test_tuning import slow_by_default

pytestmark = pytest.mark.anyio
TEXT = "loop-unrolling-and-launch-bounds"


async def call(client, tool: str, args: dict) -> dict:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return result.structured_content


@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")
async def test_stats_credit_the_text_as_submitted_and_the_tune_apart(make_client) -> None:
    """The child's text adds REPEAT=[8, 1]: as submitted (REPEAT=8) it is slower than its parent; tune then picks
    REPEAT=1. The stats said the text made it faster: they read the tuned time."""
    async with make_client() as (client, _):
        sid = (await call(client, "start_session", {"backend": "hlsl", "sizes": {"M": 64, "N": 64, "K": 64}})
               )["session_id"]
        parent = await call(client, "submit_kernel", {"session_id": sid, "source": PARENT})
        assert parent["status"] == "benchmarked", parent["message"]
        child = await call(client, "submit_kernel", {"session_id": sid, "source": slow_by_default(PARENT),
                                                     "parent": parent["version"], "transformation": TEXT})
        assert child["status"] == "benchmarked", child["message"]
        submitted = child["performance"]["speedup_vs_parent"]
        tuned = await call(client, "tune", {"session_id": sid, "version": child["version"], "max_configs": 6})
        assert tuned["recorded"] and tuned["best"]["params"]["REPEAT"] == 1, tuned
        answer = await client.call_tool("get_transformation_stats", {"session_id": sid})
        stats = answer.structured_content["transformations"]
        line = next(line for line in answer.content[0].text.splitlines() if line.startswith(f"{TEXT}:"))
        assert "as submitted" in line, line
        assert "tuned later: 1 (1 took another configuration: tune gained a median" in line, line  # said, not kept
        row = next(s for s in stats if s["transformation"] == TEXT)
        assert row["median_speedup_vs_parent"] == pytest.approx(submitted, rel=0.01), (row, submitted)
        assert row["successes"] == 0 and row["slowdowns"] + row["within_noise"] == 1, row
        assert row["tuned_later"] == 1 and row["median_tune_speedup"] > 2, row  # REPEAT 8 -> 1: tune's gain


class DecliningLLM(ScriptedLLM):
    """Answers its scripted replies, then declines as a user does (a JSON-RPC error for sampling/createMessage)."""

    async def __call__(self, context, params: types.CreateMessageRequestParams):
        if not self.replies:
            self.prompts.append(params.messages[-1].content.text)
            return types.ErrorData(code=-1, message="declined by user")
        return await super().__call__(context, params)


async def test_a_declined_sampling_request_ends_in_an_answer_with_the_attempts(make_client) -> None:
    """Sampling over the back-channel (a client before 2026-07-28): the first reply is recorded (a compile error),
    the second request is declined. The answer says so, names the attempt and how to go on without sampling."""
    llm = DecliningLLM([fenced(BROKEN)])
    async with make_client(sampling_callback=llm, mode="legacy") as (client, _):
        sid = await _start(client)
        result = await client.call_tool("apply_transformation", {"session_id": sid,
                                                                 "transformation": "shared-memory-tiling"})
        assert not result.is_error, result.content[0].text
        step = result.structured_content
        assert len(llm.prompts) == 2 and not step["done"] and len(step["attempts"]) == 1
        message = step["message"]
        assert "sampling was declined by the client (declined by user)" in message, message
        assert "1 attempt(s) recorded: v1 compile_error (compile)" in message, message
        assert "get_transformation(transformation='shared-memory-tiling')" in message
        assert f"submit_kernel(session_id={sid!r}" in message
        # The no-sampling path it names works: the submission is the run's next attempt.
        report = await call(client, "submit_kernel", {"session_id": sid, "source": BROKEN.replace(
            " + missing_symbol", ""), "transformation": "shared-memory-tiling"})
        assert report["origin"] == "apply" and report["status"] == "compiled", report["message"]


async def test_a_decline_in_input_required_rounds_leaves_the_run_open_for_submit_kernel(make_client) -> None:
    """A 2026-07-28 client declines inside its own driver (the SDK raises; the server never hears of it), so no
    answer can carry the summary there: the tool's description says where the attempts are and how to go on, and
    that way works."""
    from mcp.shared.exceptions import MCPError

    llm = DecliningLLM([fenced(BROKEN)])
    async with make_client(sampling_callback=llm, mode="auto") as (client, _):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert "A declined sampling request leaves the run open" in tools["apply_transformation"].description
        sid = await _start(client)
        with pytest.raises(MCPError, match="declined by user"):
            await client.call_tool("apply_transformation", {"session_id": sid,
                                                            "transformation": "shared-memory-tiling"})
        rows = (await call(client, "history", {"session_id": sid}))["rows"]
        assert [(r["transformation"], r["attempt"], r["status"]) for r in rows[1:]] == [
            ("shared-memory-tiling", 1, "compile_error")]
        report = await call(client, "submit_kernel", {"session_id": sid, "source": BROKEN.replace(
            " + missing_symbol", ""), "transformation": "shared-memory-tiling"})
        assert report["origin"] == "apply" and report["status"] == "compiled", report["message"]
        rows = (await call(client, "history", {"session_id": sid}))["rows"]
        assert rows[-1]["attempt"] == 2  # recorded as the open run's next attempt


async def test_what_the_tools_and_prompt_say_holds_for_a_non_matmul_problem(make_client, settings, tmp_path) -> None:
    from tests.test_reference_kernel import NO_REFERENCE

    settings.allow_define_problem = True
    async with make_client() as (client, _):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        dtype = tools["start_session"].input_schema["properties"]["dtype"]["description"]
        assert "accumulation and output" not in dtype and "ABI" in dtype, dtype
        prompt = await client.get_prompt("optimize_kernel", {"problem": "rmsnorm"})
        text = prompt.messages[0].content.text
        assert "M=4096,N=4096,K=4096" not in text and "sizes ROWS=" in text, text[:300]
        defined = await client.call_tool("define_problem", {"source": NO_REFERENCE})
        assert not defined.is_error, defined.content[0].text
        answer = defined.content[0].text
        assert "start_session needs reference_kernel" in answer and "first submission is its v0" not in answer, answer


def test_stats_say_what_they_left_uncompared() -> None:
    """An agent read '2 general and passed: 0 faster, 0 within noise, 1 slower' and could not tell where the second
    went (its parent had failed to compile: no time to compare with)."""
    from peak_mcp.api.summaries import stats

    [line] = stats({"transformations": [{"transformation": "t", "attempts": 2, "applied": 2, "successes": 0,
                                         "within_noise": 0, "slowdowns": 1, "median_speedup_vs_parent": 0.5}]})
    assert "1 slower, 1 not compared (no timed parent to compare with)" in line and "0.5× as submitted" in line


async def test_traits_read_from_shapes_alone_are_said_to_be_a_guess(make_client) -> None:
    """An agent's LayerNorm was given 'traits elementwise' (its output is shaped like its input) without a word, and
    got matmul and elementwise texts instead of the row texts. A guess is now said to be one, with the fix."""
    from tests.test_define_problem import NEGATE

    async with make_client() as (client, _):
        defined = await client.call_tool("define_problem", {"source": NEGATE})
        assert not defined.is_error, defined.content[0].text
        line = defined.content[0].text.splitlines()[0]
        assert "traits elementwise (read from a probe of the reference" in line and "TRAITS = [" in line, line
        assert "only for no backend" not in line and "no naive kernel" in line, line
        listed = (await client.call_tool("list_problems", {})).content[0].text
        softmax = next(x for x in listed.splitlines() if x.startswith("softmax:"))
        assert "guessed" not in softmax, softmax  # its TRAITS are declared


def test_a_large_speedup_called_noise_says_the_spread_that_makes_it_so() -> None:
    """An agent read "2.38× v0 (within noise)" as false: other answers called 2.34× faster beyond noise. The spread
    of a tuned timing on a busy CPU device (cv 0.59) made it so; the answer now says that."""
    from peak_mcp.api.summaries import performance

    line = performance({"median_ms": 16.94, "cv": 0.59, "speedup_vs_parent": 0.5, "change_vs_parent": "slower "
                        "beyond noise", "speedup_vs_v0": 2.38, "change_vs_v0": "within noise"})[0]
    assert "2.38× v0 (within noise: the timings spread widely (this one's cv 0.59)" in line
    close = performance({"median_ms": 1.0, "cv": 0.3, "speedup_vs_parent": 1.05, "change_vs_parent": "within noise"})
    assert "1.05× its parent (within noise)" in close[0]  # near 1: noise needs no explaining
