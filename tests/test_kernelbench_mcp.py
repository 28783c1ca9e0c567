"""A KernelBench file (class Model, get_inputs, get_init_inputs) in an operator's problem folder, imported unchanged,
through a real MCP client on lavapipe: listed with its symbols and ABI, a session with no naive kernel (the first
submission is v0), a correct kernel and a wrong one. relu.py needs torch (CI tries to install it CPU-only:
PEAK_MCP_TORCH=cpu); np_relu.py is the same file with numpy arrays, so the path is tested without torch too."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from peak_mcp.api.responses import whole_answer
from tests.conftest import has_device

pytestmark = pytest.mark.anyio
VULKAN = pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")
DATA = Path(__file__).resolve().parent / "data" / "kernelbench"
RELU = """// peak: entry=main groups=(1024, cdiv(BATCH_SIZE * DIM, 65536), 1)
struct Params { uint BATCH_SIZE; uint DIM; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;  // the ABI's `out` is an HLSL keyword: bindings go by number
[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID) {
    uint i = id.y * 65536 + id.x;  // 1,024 groups across, rows of them down y: no 65,535-group limit to break
    if (i < p.BATCH_SIZE * p.DIM) y[i] = BODY;
}
"""


async def call(client: Any, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return whole_answer(tool, result)  # the long parts (source, ABI, ...) back from the text


@VULKAN
@pytest.mark.parametrize("file", ["relu.py", "np_relu.py"])
async def test_a_kernelbench_file_through_mcp(make_client, settings, tmp_path: Path, file: str) -> None:
    if file == "relu.py":
        pytest.importorskip("torch")
    folder = tmp_path / "problems"
    folder.mkdir()
    shutil.copy(DATA / file, folder / "relu.py")
    settings.problem_dirs = [folder]
    async with make_client() as (client, _):
        listed = await call(client, "list_problems", {})
        assert not [e for e in listed.get("errors", []) if "relu" in e["file"]], listed.get("errors")
        relu = (await call(client, "list_problems", {"problem": "relu"}))["problems"][0]
        assert relu["sizes"] == ["BATCH_SIZE", "DIM"] and relu["default_sizes"] == {"BATCH_SIZE": 16, "DIM": 16384}
        assert relu["naive"] == [] and "hlsl" in relu["backends"]
        assert "[[vk::binding(0)]] x (float, BATCH_SIZE×DIM)" in relu["abi"]["hlsl"]
        assert "void <entry>(const float* x, float* out, int BATCH_SIZE, int DIM)" in relu["abi"]["cuda"]

        session = await call(client, "start_session", {"problem": "relu", "backend": "hlsl", "dtype": "f32",
                                                       "sizes": {"BATCH_SIZE": 8, "DIM": 100}})
        sid = session["session_id"]
        assert session.get("head") is None and not session.get("version_0")
        assert "Submit your first kernel" in session["brief"] and "vk::binding(1)" in session["abi"]
        first = await call(client, "submit_kernel", {"session_id": sid,
                                                     "source": RELU.replace("BODY", "max(x[i], 0.0)")})
        assert first["version"] == 0 and first["status"] == "benchmarked", first["message"]
        assert first["generality"]["passed"] is True and first["head"] == 0
        wrong = await call(client, "submit_kernel", {"session_id": sid, "source": RELU.replace("BODY", "x[i]")})
        assert wrong["version"] == 1 and wrong["failure"] == "wrong_result", wrong
        history = await call(client, "history", {"session_id": sid})
        assert [r["version"] for r in history["rows"]] == [0, 1] and history["head"] == 0
        assert history["rows"][1]["parent"] == 0
