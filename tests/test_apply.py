"""apply_transformation through a real MCP client whose sampling callback plays the LLM."""

from __future__ import annotations

import json

import mcp.types as types
import pytest

from peak_mcp.api.responses import whole_answer
from tests.conftest import EXAMPLES, has_device, skip_reason, step_of

pytestmark = pytest.mark.anyio
SMALL = {"M": 64, "N": 48, "K": 32}
TILED = (EXAMPLES / "cuda" / "smem_tiled.cu").read_text()
BROKEN = TILED.replace("float acc = 0.0f;", "float acc = 0.0f + missing_symbol;")


class ScriptedLLM:
    """Answers sampling requests from a script and keeps the prompts it saw."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.prompts: list[str] = []

    async def __call__(self, context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.prompts.append(params.messages[-1].content.text)
        text = self.replies.pop(0)
        return types.CreateMessageResult(role="assistant", model="scripted",
                                         content=types.TextContent(type="text", text=text))


def fenced(source: str, lang: str = "cuda") -> str:
    return f"Here is the tiled kernel.\n\n```{lang}\n{source}```\n"


async def _start(client, backend: str = "cuda", sizes=SMALL, dtype: str = "f32") -> str:
    result = await client.call_tool("start_session", {"backend": backend, "sizes": sizes, "dtype": dtype})
    assert not result.is_error, result.content[0].text
    return result.structured_content["session_id"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # 2026-07-28 input-required rounds, and the classic back-channel
async def test_compile_error_then_success_is_retried_and_recorded(make_client, mode: str) -> None:
    llm = ScriptedLLM([fenced(BROKEN), fenced(TILED)])
    async with make_client(sampling_callback=llm, mode=mode) as (client, _):
        sid = await _start(client)
        result = await client.call_tool("apply_transformation", {"session_id": sid,
                                                                 "transformation": "shared-memory-tiling"})
        assert not result.is_error, result.content[0].text
        step = result.structured_content
        assert step["done"] and step["succeeded"] and step["attempt"] == 2
        assert step["attempts"][0]["status"] == "compile_error"
        assert step["result"] == step["attempts"][-1]["version"]  # the ending version, its report not repeated
        # The second prompt carried the compiler's complaint once, with its line number, and the code it was about.
        retry = llm.prompts[1]
        assert retry.count('identifier "missing_symbol" is undefined') == 1, retry
        assert "kernel.cu(" in retry and "attempt 2 of 3" in retry
        failed_block = retry.split("this code failed\n```cuda\n", 1)[1].split("```", 1)[0]
        assert failed_block == BROKEN.rstrip() + "\n"
        assert "+    float acc = 0.0f + missing_symbol;" in retry and "-    float acc = 0.0f;" in retry  # the diff
        assert "Head (where work continues by default): version 0" in retry
        assert "shared-memory-tiling" in llm.prompts[0] and "const float* A" in llm.prompts[0]
        assert "attempt 1 of 3" in llm.prompts[0] and "previous attempt" not in llm.prompts[0]
        rows = (await client.call_tool("history", {"session_id": sid})).structured_content["rows"]
        assert [(r["transformation"], r["attempt"]) for r in rows[1:]] == [("shared-memory-tiling", 1),
                                                                            ("shared-memory-tiling", 2)]
        stats = (await client.call_tool("get_transformation_stats", {})).structured_content["transformations"]
        tiling = next(s for s in stats if s["transformation"] == "shared-memory-tiling")
        assert tiling["attempts"] == 2 and tiling["runs"] == 1 and tiling["first_try_success_rate"] == 0.0
        assert tiling["failure_kinds"] == {"compile": 1}


async def test_attempts_are_bounded_and_unusable_replies_recorded(make_client) -> None:
    llm = ScriptedLLM(["I would tile it.", fenced(BROKEN)])
    async with make_client(sampling_callback=llm) as (client, _):
        sid = await _start(client)
        step = (await client.call_tool("apply_transformation", {
            "session_id": sid, "transformation": "shared-memory-tiling", "max_attempts": 2})).structured_content
        assert step["done"] and not step["succeeded"]
        assert [a["status"] for a in step["attempts"]] == ["invalid_reply", "compile_error"]
        assert "no fenced code block" in step["attempts"][0]["message"]
        # An unusable reply has no code to fix: the retry shows the parent kernel and what the reply began with.
        assert "the reply could not be used" in llm.prompts[1] and "I would tile it." in llm.prompts[1]
        assert "Current kernel (version 0, the parent)" in llm.prompts[1]
        assert "extern \"C\" __global__ void matmul" in llm.prompts[1]
        head = (await client.call_tool("get_version", {"session_id": sid})).structured_content
        assert head["report"]["version"] == 0  # failures never move head


async def test_without_sampling_the_brief_comes_back_and_submit_completes_the_run(make_client) -> None:
    async with make_client() as (client, _):
        sid = await _start(client)
        step = step_of(await client.call_tool("apply_transformation", {
            "session_id": sid, "transformation": "shared-memory-tiling", "instructions": "use 32x32 tiles"}))
        assert not step["done"] and "submit_kernel" in step["message"]
        assert "use 32x32 tiles" in step["brief"] and "extern \"C\" __global__ void matmul" in step["brief"]
        assert "Head (where work continues by default): version 0 (not timed on this machine" in step["brief"]
        report = (await client.call_tool("submit_kernel", {"session_id": sid, "source": TILED,
                                                           "transformation": "shared-memory-tiling"})
                  ).structured_content
        assert report["origin"] == "apply" and report["transformation"] == "shared-memory-tiling"
        stats = (await client.call_tool("get_transformation_stats", {})).structured_content["transformations"]
        # compiled on a machine without a GPU: nothing ran, so nothing says it is faster; no success to count
        assert stats[0]["runs"] == 1 and stats[0]["compiled_only"] == 1
        assert stats[0]["first_try_success_rate"] == 0.0 and stats[0]["successes"] == 0


class FixingLLM(ScriptedLLM):
    """A stateless LLM that can only repair what the brief shows it: its retry takes the failed code out of the
    brief and applies one edit. Without the failed code in the brief there is nothing to edit, and it fails."""

    def __init__(self, first: str, fix: tuple[str, str], lang: str) -> None:
        super().__init__([fenced(first, lang)])
        self.fix, self.lang = fix, lang

    async def __call__(self, context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        if self.replies:
            return await super().__call__(context, params)
        brief = params.messages[-1].content.text
        self.prompts.append(brief)
        marker = f"this code failed\n```{self.lang}\n"
        if marker not in brief:
            text = "I cannot see the code that failed."
        else:
            failed = brief.split(marker, 1)[1].split("```", 1)[0]
            text = fenced(failed.replace(*self.fix), self.lang)
        return types.CreateMessageResult(role="assistant", model="fixing",
                                         content=types.TextContent(type="text", text=text))


@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
async def test_a_stateless_llm_fixes_its_failed_attempt_from_the_retry_brief(make_client) -> None:
    """On lavapipe: attempt 1 is a groupshared-tiled kernel that loads the B tile transposed (wrong results);
    attempt 2 edits the code the retry brief shows and passes."""
    tiled = (EXAMPLES / "hlsl" / "tiled_groupshared.hlsl").read_text()
    good = "if (k0 + ty < p.K && col < p.N) b = B[(k0 + ty) * p.N + col];"
    bad = "if (k0 + tx < p.K && col < p.N) b = B[(k0 + tx) * p.N + col];"
    assert good in tiled
    llm = FixingLLM(tiled.replace(good, bad), (bad, good), "hlsl")
    async with make_client(sampling_callback=llm) as (client, _):
        sid = await _start(client, "hlsl", {"M": 40, "N": 24, "K": 20})
        step = (await client.call_tool("apply_transformation", {"session_id": sid,
                                                                "transformation": "shared-memory-tiling"})
                ).structured_content
        assert step["succeeded"] and [a["failure"] for a in step["attempts"]] == ["wrong_result", None], step
        assert step["resolved_transformation"] == "hlsl-groupshared-tiling"
        retry = llm.prompts[1]
        assert retry.count("relative L2 error") == 1, retry  # the verdict, once
        assert "--- v0\n+++ v1" in retry and f"+        {bad}" in retry  # the diff from the parent
        assert "Head and best (the fastest general version): version 0: " in retry and " ms" in retry
        assert "Yardstick:" in retry
        source = whole_answer("get_version", await client.call_tool("get_version", {"session_id": sid}))["source"]
        assert source == tiled.rstrip() + "\n"


@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
async def test_texts_for_another_backend_or_dtype_are_refused(make_client) -> None:
    async with make_client() as (client, _):
        sid = await _start(client, "hlsl", {"M": 8, "N": 8, "K": 8})
        for transformation, why in (("tensor-cores", "written for cuda, not hlsl"),
                                    ("hlsl-16bit-types", "f16, bf16 sessions, not f32")):
            result = await client.call_tool("apply_transformation", {"session_id": sid,
                                                                     "transformation": transformation})
            assert result.is_error and why in result.content[0].text, result.content[0].text


@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
async def test_wrong_results_are_fed_back_on_a_real_device(make_client) -> None:
    naive = (EXAMPLES / "hlsl" / "naive.hlsl").read_text()
    wrong = naive.replace("acc += float(A[row * p.K + k]) * float(B[k * p.N + col]);",
                          "acc += float(A[row * p.K + k]) * float(B[k * p.N + col]) * 1.001;")
    assert wrong != naive
    llm = ScriptedLLM([fenced(wrong, "hlsl"), fenced(naive, "hlsl")])
    async with make_client(sampling_callback=llm) as (client, _):
        sid = await _start(client, "hlsl", {"M": 33, "N": 17, "K": 9})
        step = (await client.call_tool("apply_transformation", {"session_id": sid,
                                                                "transformation": "shared-memory-tiling"})
                ).structured_content
        assert step["succeeded"] and [a["failure"] for a in step["attempts"]] == ["wrong_result", None]
        assert "wrong_result" in llm.prompts[1] and "relative L2 error" in llm.prompts[1]


@pytest.mark.parametrize(("arch", "resolved"), [("sm_90a", "hopper-wgmma"), ("sm_80", "tensor-cores")])
async def test_catalog_resolution_is_the_same_after_a_restart(make_client, settings, arch: str,
                                                             resolved: str) -> None:
    """The session keeps the device it was described with (arch, family), so a new server on the same data dir
    resolves a transformation to the same specialization; a compile-only device follows the configured arch
    ($PEAK_CUDA_ARCH). f16: hopper-wgmma applies to 16-bit inputs only."""
    settings.cuda_arch = arch
    steps = []
    for _ in range(2):  # the second server starts from the first one's data dir
        async with make_client() as (client, _):
            sid = await _start(client, dtype="f16") if not steps else steps[0]["session_id"]
            step = (await client.call_tool("apply_transformation", {"session_id": sid,
                                                                     "transformation": "tensor-cores"}))
            assert not step.is_error, step.content[0].text
            steps.append(step.structured_content)
    assert steps[0]["resolved_transformation"] == steps[1]["resolved_transformation"] == resolved


async def test_a_specialization_is_announced_and_the_plain_text_stays_reachable(make_client, settings) -> None:
    """On an H100 target (sm_90a) tensor-cores resolves to hopper-wgmma: the answer says so and how to get the plain
    text, and exact=true gives that text's brief."""
    settings.cuda_arch = "sm_90a"
    async with make_client() as (client, _):
        sid = await _start(client, dtype="f16")
        step = step_of(await client.call_tool("apply_transformation", {"session_id": sid,
                                                                        "transformation": "tensor-cores"}))
        assert step["resolved_transformation"] == "hopper-wgmma"
        assert step["note"] == ("resolved to hopper-wgmma, the hopper (sm_90a) specialization of tensor-cores; pass "
                                "exact=true for tensor-cores itself")
        assert step["brief"].startswith("# Task: apply the transformation `hopper-wgmma`")
        plain = step_of(await client.call_tool("apply_transformation", {"session_id": sid,
                                                                         "transformation": "tensor-cores",
                                                                         "exact": True}))
        assert plain["resolved_transformation"] == "tensor-cores" and plain.get("note") is None, plain.get("note")
        assert plain["brief"].startswith("# Task: apply the transformation `tensor-cores` (Tensor cores through the "
                                         "WMMA API")
        assert "wgmma.m64n128k16" not in plain["brief"] and "wmma::fragment<wmma::matrix_a" in plain["brief"]
        # A variant asked for by its own id is no swap.
        direct = (await client.call_tool("apply_transformation", {"session_id": sid, "transformation": "hopper-wgmma"})
                  ).structured_content
        assert direct["resolved_transformation"] == "hopper-wgmma" and direct.get("note") is None


def test_a_brief_for_a_tuned_kernel_asks_to_keep_its_parameters() -> None:
    from peak_mcp.catalog.brief import TUNING_RULE, KernelTask, Standing, build_brief
    from peak_mcp.core.devices import Device
    from tests.test_tuning import TUNED

    task = KernelTask(problem="matmul", problem_title="t", abi="abi", backend="hlsl", dtype="f32",
                      sizes={"M": 64, "N": 64, "K": 64}, device=Device(name="d"), transformation_id="x",
                      transformation_title="x", transformation_body="text", instructions=None, language="hlsl")
    assert TUNING_RULE in build_brief(task, Standing(head=0, peak_path="fp32"), TUNED)
    plain = TUNED.replace("// peak: params", "// params").replace("// peak: where", "// where")
    assert TUNING_RULE not in build_brief(task, Standing(head=0, peak_path="fp32"), plain)


@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
async def test_an_hlsl_brief_carries_hlsl_only_and_one_tuning_section(make_client) -> None:
    """Issue 20: the double-buffering brief for a tuned HLSL kernel showed the text's CUDA loop, its NVIDIA
    tuning lines and two "Tuning parameters" sections (the text's BK=[8, 16] beside the rule to keep the kernel's
    own parameters). Now: no cuda block, no other platform's line, one section holding the rule and the text's
    HLSL line."""
    from tests.test_tuning import TUNED

    llm = ScriptedLLM([fenced(TUNED, "hlsl")])
    async with make_client(sampling_callback=llm) as (client, _):
        sid = await _start(client, "hlsl", {"M": 8, "N": 8, "K": 8})
        tuned = await client.call_tool("submit_kernel", {"session_id": sid, "source": TUNED})
        assert not tuned.is_error, tuned.content[0].text
        await client.call_tool("apply_transformation", {"session_id": sid, "transformation": "double-buffering",
                                                        "version": tuned.structured_content["version"],
                                                        "max_attempts": 1})
    brief = llm.prompts[0]
    assert "```cuda" not in brief and "```hlsl\n     fetch(0); stash(0); GroupMemoryBarrierWithGroupSync();" in brief
    assert "- NVIDIA" not in brief and "- AMD" not in brief
    assert brief.count("## Tuning parameters") == 1, brief
    tuning = brief.split("## Tuning parameters", 1)[1]
    assert "Keep them" in tuning and "- HLSL on lavapipe" in tuning and "keeps the kernel's own" in tuning


@pytest.mark.anyio
async def test_a_brief_says_when_its_kernel_did_none_of_the_texts_usual_predecessors(make_client) -> None:
    """An experiment applies every text to v0; double-buffering's text assumes a register-blocked kernel ("keep
    the tile shape"). Its brief now says the naive kernel did none of its predecessors, and what to do about it;
    shared-memory-tiling (no predecessor) gets no such section."""
    async with make_client() as (client, _):
        sid = await _start(client)
        step = step_of(await client.call_tool("apply_transformation", {
            "session_id": sid, "transformation": "double-buffering"}))
        assert "## Starting point" in step["brief"]
        assert "usually comes after register-blocking-2d" in step["brief"]
        assert "version 0 has done none" in step["brief"]
        plain = step_of(await client.call_tool("apply_transformation", {
            "session_id": sid, "transformation": "shared-memory-tiling"}))
        assert "## Starting point" not in plain["brief"]


@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
@pytest.mark.anyio
async def test_an_hlsl_brief_gives_the_device_limits_its_texts_tell_the_reader_to_check(make_client) -> None:
    """hlsl-groupshared-tiling says "if 512 threads exceed the device's maxComputeWorkGroupInvocations": the brief's
    device facts had no such limit (an LLM answering an experiment had to guess)."""
    async with make_client() as (client, _):
        sid = await _start(client, backend="hlsl")
        step = step_of(await client.call_tool("apply_transformation", {
            "session_id": sid, "transformation": "hlsl-groupshared-tiling"}))
        device = json.loads(step["brief"].split("## Device\n", 1)[1].split("\n", 1)[0])
        assert device["max_compute_workgroup_invocations"] >= 128 and len(device["max_compute_workgroup_size"]) == 3
        assert device["device_type"] == "cpu"  # lavapipe


def test_a_briefs_standing_gives_a_memory_bound_version_in_gb_per_s() -> None:
    """An agent's rmsnorm brief read "Head ... 16.94 ms, 6.19e-05 TFLOP/s" where every report said GB/s."""
    from peak_mcp.catalog.brief import Standing, describe_standing

    text = describe_standing(Standing(head=2, head_ms=16.94, head_tflops=6.19e-5, head_gbps=0.124))
    assert "version 2: 16.94 ms, 0.124 GB/s" in text and "TFLOP/s" not in text, text
    gemm = describe_standing(Standing(head=1, head_ms=3.2, head_tflops=43.0, head_gbps=60.0))
    assert "43 TFLOP/s" in gemm, gemm


@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
@pytest.mark.anyio
async def test_a_brief_names_generality_sizes_params_lines_and_a_cpu_devices_spread(make_client) -> None:
    """An experiment's LLM (exp43) read "the awkward sizes that generality samples (within the session's
    constraints)" with neither named, a `// peak: params NT=[...]` line beside "one `peak:` line" with no word on
    who defines NT, SM_COUNT on a device that reports none, and one time per version with no spread (the same
    source timed 410 and 194 ms on a busy CPU)."""
    from peak_mcp.evaluation.generality import sample_sizes
    from peak_mcp.problems.matmul import Matmul

    async with make_client() as (client, _):
        result = await client.call_tool("start_session", {"backend": "hlsl", "sizes": {"M": 24, "N": 24, "K": 16},
                                                          "dtype": "f32", "constraints": ["K % 8 == 0"]})
        assert not result.is_error, result.content[0].text
        sid = result.structured_content["session_id"]
        step = step_of(await client.call_tool("apply_transformation", {
            "session_id": sid, "transformation": "hlsl-groupshared-tiling"}))
    brief = step["brief"]
    sampled = sample_sizes(Matmul(), {"M": 24, "N": 24, "K": 16}, ["K % 8 == 0"])
    assert sampled and all(s["K"] % 8 == 0 for s in sampled)
    assert f"the {len(sampled)} awkward sizes generality checks: " in brief, brief[:1500]
    assert all(", ".join(f"{k}={v}" for k, v in s.items()) in brief for s in sampled)
    assert "The session's constraints: K % 8 == 0." in brief
    assert "defines each NAME as a macro" in brief and "never #defines it" in brief
    assert "SM_COUNT, the device's multiprocessor count: 1 here" in brief
    standing = brief.split("## Where the session stands\n", 1)[1].split("\n## ", 1)[0]
    assert "middle half of its launches" in standing and "This device is a CPU" in standing, standing
