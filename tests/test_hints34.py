"""Issue 34: hints that pointed the wrong way, and a timeout at one sampled size that hid the wrong results found at
the others. Kernels run on lavapipe (HLSL) through the real in-process MCP client where the message reaches the
agent; validator-level ones run on lavapipe directly."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.conftest import EXAMPLES, has_device, skip_reason

pytestmark = pytest.mark.anyio


def lavapipe(test: Any) -> Any:
    """A test that runs HLSL kernels: on lavapipe here, skipped without a Vulkan device."""
    return pytest.mark.vulkan(pytest.mark.skipif(not has_device("hlsl"),
                                                 reason=f"no Vulkan device: {skip_reason('hlsl')}")(test))

SESSION = {"M": 64, "N": 64, "K": 64}
HANG_M = 1031  # the 8th of matmul's 12 sampled sizes around 64^3; four come after it


def _scaled_for_64_and_hanging() -> str:
    """A matmul whose scale is right only at K=64 (as an attention kernel's 1/sqrt(D) hard-coded for D=64), and
    that never finishes at M=1031."""
    source = (EXAMPLES / "hlsl" / "naive.hlsl").read_text()
    source = source.replace("C[row * p.N + col] = acc;",
                            "C[row * p.N + col] = acc * sqrt(64.0 / float(p.K));")
    # llvmpipe ends a loop after ~65535 iterations: 64 unrolled loads per iteration keep it past the fence timeout
    # (as tests/test_verdicts.py's hang does).
    return source.replace("float acc = 0.0;",
                          f"float acc = 0.0;\n    uint i = 0;\n    [loop] while (p.M == {HANG_M} && A[0] < 1e30) "
                          "{ i += 1; float s = 0.0; [unroll] for (uint u = 0; u < 64; ++u) "
                          "s += A[(i + u) % (p.M * p.K)]; C[row * p.N + col] = s + float(i); }")


@lavapipe
async def test_a_timeout_at_one_size_does_not_hide_the_wrong_results_at_the_others(make_client, settings) -> None:
    settings.vk_fence_timeout_s = 3
    settings.inactivity_timeout_s = 20
    settings.sanitizer = False
    async with make_client() as (client, _):
        sid = (await client.call_tool("start_session", {"backend": "hlsl", "sizes": SESSION})
               ).structured_content["session_id"]
        result = await client.call_tool("submit_kernel", {"session_id": sid, "source": _scaled_for_64_and_hanging()})
        report = result.structured_content
    message = report["message"]
    # Every size but the hung one finished, the four after it included (checked in a fresh worker): 11 are wrong.
    assert report["status"] == "not_general" and report["failure"] == "generality_wrong_result", message
    # 11 fixed sizes and one drawn at random (evaluation.generality.drawn_size), unless the draw met a fixed one
    assert message.startswith("not general") and re.search(r"wrong at (11 of 11|12 of 12) sampled other sizes",
                                                           message), message
    assert "First at M=1,N=1,K=1: wrong_result" in message, message
    assert f"Secondary: at M={HANG_M},N=7,K=67 the check ran past the job's time limit (timeout)" in message, message
    assert "this machine is busy" not in message and "PEAK_MCP_JOB_TIMEOUT" not in message, message


async def _submitted(make_client, session: dict, source: str) -> dict:
    async with make_client() as (client, _):
        started = await client.call_tool("start_session", session)
        assert not started.is_error, started.content[0].text
        sid = started.structured_content["session_id"]
        result = await client.call_tool("submit_kernel", {"session_id": sid, "source": source})
        assert not result.is_error, result.content[0].text
        return result.structured_content


@lavapipe
async def test_nan_on_the_stress_trial_after_passed_trials_is_called_an_overflow(make_client) -> None:
    """A softmax without the row's max subtracted passes the usual inputs and overflows on the stress trial's large
    ones: every element NaN, which was answered with "if the kernel adds into y (y[i] += ...)"."""
    source = (EXAMPLES.parent / "softmax" / "hlsl" / "1_groupshared.hlsl").read_text()
    source = source.replace("m = group_reduce(m, tid, true);", "m = 0.0 * group_reduce(m, tid, true);")
    report = await _submitted(make_client, {"backend": "hlsl", "problem": "softmax",
                                            "sizes": {"ROWS": 16, "COLS": 100}}, source)
    message = report["message"]
    assert report["status"] == "failed" and report["failure"] == "nan_or_inf", message
    assert "stress ranges" in message and "trials with the usual inputs passed, so this is an overflow" in message
    assert "exp without the row's maximum subtracted" in message, message
    assert "adds into" not in message and "start as NaN" not in message, message


@lavapipe
async def test_a_read_past_an_input_names_that_input_and_its_extents(make_client) -> None:
    """A matmul indexing A with N's stride reads past A's last rows; the hint said "(i < K, not i <= K)", the
    problem's last symbol, as it said "(i < D ...)" for an attention kernel reading K and V rows past S."""
    source = (EXAMPLES / "hlsl" / "naive.hlsl").read_text().replace("A[row * p.K + k]", "A[row * p.N + k]")
    report = await _submitted(make_client, {"backend": "hlsl", "sizes": {"M": 70, "N": 45, "K": 33}}, source)
    message = report["message"]
    assert report["status"] == "failed" and report["failure"] == "out_of_bounds_read", message
    assert "NaN guards around A (M=70, K=33) alone bring the NaN back" in message, message
    assert "check every index into A against those extents" in message, message
    assert "i < K" not in message, message


@lavapipe
async def test_a_read_past_x_behind_a_select_names_both_equal_buffers_honestly_and_the_select(make_client) -> None:
    """A softmax padding its max loop by 8 and guarding the read with `?:`: glslang emits a select, so the last row
    reads past x; the layer's message gives only the descriptor's size, which x and y share. It said "buffer x or
    y", and nothing of the `?:`."""
    source = (EXAMPLES.parent / "softmax" / "hlsl" / "1_groupshared.hlsl").read_text()
    old = "    for (uint c = tid; c < p.COLS; c += NT)\n        m = max(m, x[base + c]);"
    assert old in source
    source = source.replace(old, "    for (uint c = tid; c < p.COLS + 8; c += NT)\n"
                                 "        m = max(m, (c < p.COLS) ? x[base + c] : LOWEST);")
    report = await _submitted(make_client, {"backend": "hlsl", "problem": "softmax",
                                            "sizes": {"ROWS": 16, "COLS": 100}}, source)
    message = report["message"]
    assert (report["status"], report["failure"]) == ("failed", "sanitizer_vulkan_oob"), message
    assert "one of x, y: they are the same size" in message and "cannot tell them apart" in message, message
    assert "x or y" not in message, message
    line = next(n for n, text in enumerate(source.splitlines(), 1) if "? x[" in text)
    assert f"Line {line} reads x inside a `?:`" in message, message
    assert "HLSL's `?:` evaluates both sides (glslang emits a select)" in message, message


def test_a_timeout_is_counted_apart_from_wrong_results() -> None:
    """The verdict's counts: wrong results over the sizes that finished, a timeout apart (it finished no check)."""
    from peak_mcp.evaluation.phases import Generality, SizeFailure
    from peak_mcp.loop.pipeline.verdicts import not_general_message
    from peak_mcp.store.records import Outcome, Status

    finished = [{"M": m, "N": 7, "K": 5} for m in range(1, 12)]
    hung = SizeFailure(sizes={"M": 4101, "N": 33, "K": 19}, check="timeout", message="no progress for 30 s")
    only_hung = not_general_message(Outcome(status=Status.BENCHMARKED),
                                    Generality(passed=False, sizes_checked=finished, failures=[hung]))
    assert "but did not finish at 1 of 12 sampled other sizes" in only_hung, only_hung
    assert "First at M=4101,N=33,K=19: timeout: no progress for 30 s" in only_hung, only_hung
    wrong = [SizeFailure(sizes=s, check="wrong_result", message="off") for s in finished[:3]]
    both = not_general_message(Outcome(status=Status.BENCHMARKED),
                               Generality(passed=False, sizes_checked=finished, failures=[hung, *wrong]))
    assert "but wrong at 3 of 11 sampled other sizes" in both and "First at M=1,N=7,K=5: wrong_result" in both
    assert "Secondary: at M=4101,N=33,K=19 the check ran past the job's time limit" in both, both
    assert "no progress for 30 s" not in both, both
