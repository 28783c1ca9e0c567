"""Issue 34: hints that pointed the wrong way, and a timeout at one sampled size that hid the wrong results found at
the others. Kernels run on lavapipe (HLSL) through the real in-process MCP client where the message reaches the
agent; validator-level ones run on lavapipe directly."""

from __future__ import annotations

import pytest

from tests.conftest import EXAMPLES, has_device, skip_reason

pytestmark = [pytest.mark.vulkan, pytest.mark.anyio]
if not has_device("hlsl"):
    pytestmark.append(pytest.mark.skip(reason=f"no Vulkan device: {skip_reason('hlsl')}"))

SESSION = {"M": 64, "N": 64, "K": 64}
HANG_M = 1031  # the 8th of matmul's 12 sampled sizes around 64^3; four come after it


def _scaled_for_64_and_hanging() -> str:
    """A matmul whose scale is right only at K=64 (as an attention kernel's 1/sqrt(D) hard-coded for D=64), and
    that never finishes at M=1031."""
    source = (EXAMPLES / "hlsl" / "naive.hlsl").read_text()
    source = source.replace("C[row * p.N + col] = acc;",
                            "C[row * p.N + col] = acc * sqrt(64.0 / float(p.K));")
    return source.replace("float acc = 0.0;",
                          f"float acc = 0.0;\n    uint spin = 0;\n    [loop] while (p.M == {HANG_M} && A[0] < 1e30) "
                          "{ spin += 1; C[0] = float(spin); }")


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
    assert message.startswith("not general") and "wrong at 11 of 11 sampled other sizes" in message, message
    assert "First at M=1,N=1,K=1: wrong_result" in message, message
    assert f"Secondary: at M={HANG_M},N=7,K=67 the check ran past the job's time limit (timeout)" in message, message
    assert "this machine is busy" not in message and "PEAK_MCP_JOB_TIMEOUT" not in message, message
