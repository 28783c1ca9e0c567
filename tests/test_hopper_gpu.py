"""The Hopper GEMM ladder through the server on a Hopper GPU: every step, f16 and bf16, validates at a size where
the TMA path runs with edge tiles (the server also checks its other sizes, 77 and 1000 among them) and at one where
TMA cannot map the operands and the kernel must take its fallback. Skipped without a CUDA GPU of compute
capability 9.x (wgmma, TMA and setmaxnreg need sm_90a)."""

from __future__ import annotations

import pytest

from tests.conftest import EXAMPLES, hopper_marks

pytestmark = hopper_marks()

STEPS = ("wgmma_tma.cu", "wgmma_ws.cu", "wgmma_persistent.cu", "wgmma_cluster.cu")
SIZES = {"mapped": {"M": 1000, "N": 1032, "K": 520},  # K, N multiples of 8: TMA, with partial tiles on every edge
         "fallback": {"M": 515, "N": 259, "K": 130}}  # 2-byte rows of 260 and 518 bytes: zero maps, SIMT path


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("where", sorted(SIZES))
async def test_every_ladder_step_validates(make_client, dtype: str, where: str) -> None:
    async with make_client() as (client, _):
        started = await client.call_tool("start_session", {"backend": "cuda", "dtype": dtype, "sizes": SIZES[where]})
        assert not started.is_error, started.content[0].text
        sid = started.structured_content["session_id"]
        for name in STEPS:
            source = (EXAMPLES / "cuda" / dtype / "hopper" / name).read_text()
            result = await client.call_tool("submit_kernel", {"session_id": sid, "source": source})
            assert not result.is_error, result.content[0].text
            report = result.structured_content
            assert report["status"] == "benchmarked", (name, report.get("message"))
            assert report["validation"]["rel_l2_error"] < 1e-4, (name, report["validation"])
