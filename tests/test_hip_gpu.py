"""The HIP loop on a real GPU through an in-process MCP client: on NVIDIA through the CUDA device header (the
CUDA executor runs it), on AMD through hip-python. Skipped where no HIP device is present."""

from __future__ import annotations

import pytest

from peak_mcp.api.responses import whole_answer
from tests.conftest import EXAMPLES, has_device, hip_platform, skip_reason

pytestmark = [pytest.mark.gpu, pytest.mark.anyio]
if not has_device("hip"):
    pytestmark.append(pytest.mark.skip(reason=f"no HIP GPU: {skip_reason('hip')}"))

SIZES = {"M": 515, "N": 259, "K": 130}  # not tile multiples: the examples must handle edges
WRONG = """#include <hip/hip_runtime.h>
// peak: entry=k grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
extern "C" __global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {
    int r = hipBlockIdx_y * 16 + hipThreadIdx_y, c = hipBlockIdx_x * 16 + hipThreadIdx_x;
    if (r >= M || c >= N) return;
    float acc = 0.f;
    for (int k = 0; k < K - 1; ++k) acc += A[r * K + k] * B[k * N + c];   // drops the last k
    C[r * N + c] = acc;
}
"""


async def _submit(client, session_id: str, source: str) -> dict:
    result = await client.call_tool("submit_kernel", {"session_id": session_id, "source": source})
    assert not result.is_error, result.content[0].text
    return whole_answer("submit_kernel", result)  # its compile log: in the text


async def test_examples_run_the_loop(make_client) -> None:
    async with make_client() as (client, _):
        started = await client.call_tool("start_session", {"backend": "hip", "dtype": "f32", "sizes": SIZES})
        assert not started.is_error, started.content[0].text
        session = started.structured_content
        # The session's device in brief names the vendor, which is the HIP platform (nvidia or amd).
        assert session["device"]["vendor"] == hip_platform() and session["device"]["index"] >= 0
        assert session["version_0"]["status"] == "benchmarked", session["version_0"]["message"]
        for path in sorted((EXAMPLES / "hip").glob("*.hip")):
            report = await _submit(client, session["session_id"], path.read_text())
            if path.name == "mfma_f32.hip" and hip_platform() == "nvidia":
                assert report["status"] == "compile_error" and "AMD-only" in report["compile"]["log"]
                continue
            assert report["status"] == "benchmarked", (path.name, report["message"])
            assert report["generality"]["passed"], (path.name, report["generality"])
            assert report["performance"]["median_ms"] > 0


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
async def test_sixteen_bit_naive_kernels_validate(make_client, dtype: str) -> None:
    async with make_client() as (client, _):
        started = await client.call_tool("start_session", {"backend": "hip", "dtype": dtype, "sizes": SIZES})
        assert not started.is_error, started.content[0].text
        v0 = started.structured_content["version_0"]
        assert v0["status"] == "benchmarked", v0["message"]


async def test_a_wrong_hip_kernel_fails_validation(make_client) -> None:
    async with make_client() as (client, _):
        sid = (await client.call_tool("start_session", {"backend": "hip", "sizes": SIZES})
               ).structured_content["session_id"]
        report = await _submit(client, sid, WRONG)
        assert report["status"] == "failed" and report["failure"] == "wrong_result", report["message"]
        assert "hip_bfloat16" not in report["message"] and "const float* A" in report["message"]
