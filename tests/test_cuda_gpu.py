"""The CUDA loop on a real GPU, through an in-process MCP client. Skipped where no CUDA device is present."""

from __future__ import annotations

import pytest

from tests.conftest import EXAMPLES, ROOT, has_device, skip_reason

pytestmark = [pytest.mark.gpu, pytest.mark.anyio]
if not has_device("cuda"):
    pytestmark.append(pytest.mark.skip(reason=f"no CUDA GPU: {skip_reason('cuda')}"))

SIZES = {"M": 515, "N": 259, "K": 130}  # not tile multiples: the examples must handle edges

WRONG = """// peak: entry=k grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
extern "C" __global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {
    int r = blockIdx.y * 16 + threadIdx.y, c = blockIdx.x * 16 + threadIdx.x;
    if (r >= M || c >= N) return;
    float acc = 0.f;
    for (int k = 0; k < K - 1; ++k) acc += A[r * K + k] * B[k * N + c];   // drops the last k
    C[r * N + c] = acc;
}
"""
UNWRITTEN = WRONG.replace("if (r >= M || c >= N) return;", "if (r >= M || c >= N || c == 7) return;").replace(
    "K - 1", "K")
OUT_OF_BOUNDS = WRONG.replace("K - 1", "K").replace("C[r * N + c] = acc;", "C[r * N + c] = acc; "
                                                     "if (r == M - 1 && c == N - 1) C[M * N + 3] = 1.f;")
INPUT_WRITE = WRONG.replace("K - 1", "K").replace("const float* A", "float* A").replace(
    "C[r * N + c] = acc;", "C[r * N + c] = acc; if (r == 0 && c == 0) A[5] = 0.f;")
HANG = (ROOT / "examples" / "faults" / "hang.cu").read_text()
CRASH = (ROOT / "examples" / "faults" / "crash.cu").read_text()


async def _submit(client, session_id: str, source: str) -> dict:
    result = await client.call_tool("submit_kernel", {"session_id": session_id, "source": source})
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def test_loop_validates_and_times_examples(make_client) -> None:
    async with make_client() as (client, _):
        started = await client.call_tool("start_session", {"backend": "cuda", "dtype": "f32", "sizes": SIZES})
        assert not started.is_error, started.content[0].text
        session = started.structured_content
        assert session["version_0"]["status"] == "benchmarked"
        assert session["baseline"]["available"], session["baseline"]
        for path in sorted((EXAMPLES / "cuda").glob("*.cu")):
            report = await _submit(client, session["session_id"], path.read_text())
            assert report["status"] == "benchmarked", (path.name, report["message"])
            assert report["performance"]["median_ms"] > 0
            phases = report["phases"]
            assert {"compile", "validate", "benchmark", "generality"} <= set(phases) <= {*phases, "sanitize"}
            assert phases.get("sanitize", 0) <= phases["generality"]  # the sanitizer runs inside that job
            assert sum(v for k, v in phases.items() if k != "sanitize") <= report["seconds"]
            assert report["performance"]["pct_of_vendor"] > 0


@pytest.mark.parametrize(("source", "check"), [(WRONG, "wrong_result"), (UNWRITTEN, "unwritten_output"),
                                               (OUT_OF_BOUNDS, "out_of_bounds_write"), (INPUT_WRITE, "input_modified")])
async def test_bad_kernels_fail_the_right_check(make_client, source: str, check: str) -> None:
    async with make_client() as (client, _):
        session = (await client.call_tool("start_session", {"backend": "cuda", "sizes": SIZES})).structured_content
        report = await _submit(client, session["session_id"], source)
        assert report["status"] == "failed"
        assert report["failure"] == check, report["message"]


async def test_hang_and_crash_recover(make_client, settings) -> None:
    settings.inactivity_timeout_s = 8
    async with make_client() as (client, service):
        session = (await client.call_tool("start_session", {"backend": "cuda", "sizes": SIZES})).structured_content
        sid = session["session_id"]
        hung = await _submit(client, sid, HANG)
        assert hung["status"] == "error" and hung["failure"] == "timeout", hung["message"]
        after_hang = await _submit(client, sid, (EXAMPLES / "cuda" / "smem_tiled.cu").read_text())
        assert after_hang["status"] == "benchmarked"
        crashed = await _submit(client, sid, CRASH)
        assert crashed["status"] == "error" and crashed["failure"] in ("kernel_fault", "worker_died"), crashed
        after_crash = await _submit(client, sid, (EXAMPLES / "cuda" / "smem_tiled.cu").read_text())
        assert after_crash["status"] == "benchmarked"
        history = (await client.call_tool("history", {"session_id": sid})).structured_content
        assert [r["status"] for r in history["rows"]] == ["benchmarked", "error", "benchmarked", "error",
                                                           "benchmarked"]
        assert service.pool.restarts >= 2


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
async def test_half_precision_sessions(make_client, dtype: str) -> None:
    async with make_client() as (client, _):
        started = await client.call_tool("start_session", {"backend": "cuda", "dtype": dtype, "sizes": SIZES})
        session = started.structured_content
        assert session["version_0"]["status"] == "benchmarked", session["version_0"]["message"]
        assert session["baseline"]["available"], session["baseline"]
        assert session["baseline"]["rel_l2_error"] < 1e-3


async def test_other_sizes_and_benchmark(make_client) -> None:
    async with make_client() as (client, _):
        session = (await client.call_tool("start_session", {"backend": "cuda", "sizes": SIZES})).structured_content
        sid = session["session_id"]
        await _submit(client, sid, (EXAMPLES / "cuda" / "regblock_2d.cu").read_text())
        checked = await client.call_tool("validate", {"session_id": sid, "sizes": {"M": 64, "N": 4, "K": 1}})
        assert checked.structured_content["passed"], checked.structured_content
        timed = await client.call_tool("benchmark", {"session_id": sid, "sizes": {"M": 1024, "N": 1024, "K": 1024},
                                                     "time_budget_s": 0.2})
        body = timed.structured_content
        assert body["passed"] and body["performance"]["tflops"] > 0 and body["baseline"]["available"]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("sizes", [{"M": 1000, "N": 1032, "K": 520}, SIZES], ids=["aligned", "unaligned"])
async def test_tensor_core_examples(make_client, dtype: str, sizes: dict[str, int]) -> None:
    from peak_mcp.api.demo import example_kernels

    async with make_client() as (client, _):
        session = (await client.call_tool("start_session", {"backend": "cuda", "dtype": dtype, "sizes": sizes})
                   ).structured_content
        for path in example_kernels("cuda", dtype):
            report = await _submit(client, session["session_id"], path.read_text())
            assert report["status"] == "benchmarked", (path.name, report["message"])
            assert report["validation"]["rel_l2_error"] < 1e-4, report["validation"]
