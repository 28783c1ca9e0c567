"""A launch no device can run (over 1024 threads in a block, a grid's y past 65535) is refused in a session
without a device too, instead of being recorded as a kernel that compiled."""

from __future__ import annotations

import pytest

from peak_mcp.core.launch import beyond_portable_limits

pytestmark = pytest.mark.anyio
KERNEL = ('// peak: entry=k grid=(1, 1, 1) block=(1, 1, 1)\nextern "C" __global__ void k(const float* A, '
          'const float* B, float* C, int M, int N, int K) { C[0] = A[0]; }\n')


@pytest.mark.parametrize(("launch", "named"), [
    ("grid=(1, 1, 1) block=(2048, 1, 1)", "block dimension x=2048 is over 1024"),
    ("grid=(1, 1, 1) block=(64, 32, 1)", "2048 threads, over 1024"),
    ("grid=(1, 70001, 1) block=(32, 1, 1)", "grid dimension y=70001 is over 65535"),
    ("grid=(1, 1, 1) block=(1, 1, 128)", "block dimension z=128 is over 64"),
    ("grid=(1, 1, 1) block=(32, 1, 1) shared=M*1000000000", "shared=8,000,000,000 bytes is over the"),
    ("grid=(16, 1, 1) block=(32, 1, 1) cluster=(16, 1, 1)", "more than 8 blocks"),
])
async def test_a_compile_only_session_refuses_a_launch_no_device_can_run(make_client, launch: str, named: str) -> None:
    source = KERNEL.replace("grid=(1, 1, 1) block=(1, 1, 1)", launch)
    async with make_client() as (client, _):
        sid = (await client.call_tool("start_session", {"backend": "cuda", "sizes": {"M": 8, "N": 8, "K": 8}})
               ).structured_content["session_id"]
        report = (await client.call_tool("submit_kernel", {"session_id": sid, "source": source})).structured_content
        assert report["status"] == "invalid_annotation" and named in report["message"], report["message"]
        assert "cannot run" in report["message"]


def test_launches_within_every_limit_pass() -> None:
    assert beyond_portable_limits({"grid": (2**31 - 1, 65535, 65535), "block": (1024, 1, 1), "shared": 0}) is None
    assert beyond_portable_limits({"groups": (65535, 1, 1), "shared": 0}) is None
    assert "groups dimension x=65536" in (beyond_portable_limits({"groups": (65536, 1, 1), "shared": 0}) or "")
