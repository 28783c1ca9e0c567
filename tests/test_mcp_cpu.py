"""The MCP surface through a real in-process client on a machine without a GPU: NVRTC compiles for real."""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path

import pytest

from peak_mcp.api.app import build
from peak_mcp.api.responses import whole_answer
from tests.conftest import EXAMPLES, ROOT

pytestmark = pytest.mark.anyio

TOOLS = {"doctor", "list_problems", "start_session", "list_sessions", "submit_kernel", "validate", "benchmark",
         "history", "get_version", "diff", "revert", "list_transformations", "get_transformation",
         "apply_transformation", "get_transformation_stats", "profile", "suggest_next"}
SMALL = {"M": 64, "N": 48, "K": 32}
EMPTY = ('// peak: entry=k grid=(1, 1, 1) block=(1, 1, 1) shared=0\n'
         'extern "C" __global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {}\n')
SYNTAX_ERROR = """// peak: entry=k grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0
extern "C" __global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {
    int r = blockIdx.y * 16 + threadIdx.y;
    C[r] = undeclared_name;
}
"""


async def _session(client, backend: str = "cuda", **extra) -> dict:
    result = await client.call_tool("start_session", {"backend": backend, "sizes": SMALL, **extra})
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def test_tools_are_listed_and_output_schemas_served(make_client) -> None:
    async with make_client() as (client, _):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) >= TOOLS
        schemas = json.loads((await client.read_resource("peak://output-schemas")).contents[0].text)
        assert schemas["submit_kernel"]["properties"]["status"]
        assert "rows" in schemas["history"]["properties"]


async def test_doctor_explains_what_is_missing(make_client) -> None:
    async with make_client() as (client, _):
        report = (await client.call_tool("doctor", {})).structured_content
        cuda = next(b for b in report["backends"] if b["backend"] == "cuda")
        assert cuda["compiler"]["available"], cuda
        if not cuda["can_run"]:
            assert cuda["missing"] and all(m["fix"] for m in cuda["missing"])


async def test_doctor_names_toolkits_by_label_not_host_path(make_client, settings, tmp_path, monkeypatch) -> None:
    """doctor used to return the venv's absolute include dir and the data dir. Over MCP it names the toolkits by
    label and the data dir from home; `peak-mcp doctor` on the host keeps the whole paths."""
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: tmp_path))
    async with make_client() as (client, service):
        answer = await client.call_tool("doctor", {})
        report = answer.structured_content
        host = [sys.prefix, str(ROOT), str(tmp_path), *(os.path.realpath(p) for p in (sys.prefix, ROOT, tmp_path))]
        for text in (answer.content[0].text, json.dumps(report)):
            assert not [p for p in host if p in text], text
        assert report["data_dir"] == "~/data"
        assert report["catalog"]["dirs"] == ["<catalog>"]
        compilers = {b["backend"]: b["compiler"] for b in report["backends"]}
        for compiler in (compilers["cuda"], compilers["hip"].get("nvidia", {})):
            assert all(d.startswith("<cuda>/") for d in compiler.get("include_dirs", [])), compiler
        if "header" in compilers["hip"].get("nvidia", {}):
            assert compilers["hip"]["nvidia"]["header"] == "<hip>/hip_runtime.h"
        assert service.doctor().data_dir == str(settings.data_dir)  # what `peak-mcp doctor` prints
        monkeypatch.setattr(Path, "home", classmethod(lambda cls: tmp_path / "elsewhere"))
        assert (await client.call_tool("doctor", {})).structured_content["data_dir"] is None


async def test_compile_only_session_and_compile_errors(make_client) -> None:
    async with make_client() as (client, _):
        session = await _session(client)
        v0 = session["version_0"]
        if session["device"].get("index", -1) >= 0:
            pytest.skip("a CUDA device is present: tests/test_cuda_gpu.py covers the running loop")
        assert v0["status"] == "compiled" and v0["compile"]["resources"]["registers"] > 0
        bad = (await client.call_tool("submit_kernel", {"session_id": session["session_id"],
                                                        "source": SYNTAX_ERROR}))
        bad = whole_answer("submit_kernel", bad)
        assert bad["status"] == "compile_error"
        assert "kernel.cu(4)" in bad["compile"]["log"] and "undeclared_name" in bad["compile"]["log"]
        good = (await client.call_tool("submit_kernel", {"session_id": session["session_id"], "source":
                                                         (EXAMPLES / "cuda" / "regblock_2d.cu").read_text()}))
        body = good.structured_content
        assert body["status"] == "compiled" and body["compile"]["resources"]["static_shared_bytes"] == 8192
        assert set(body["phases"]) == {"compile"} and 0 < body["phases"]["compile"] <= body["seconds"]
        # Nothing ran: head stays on v0, and the answer says why. An empty kernel compiles too.
        assert body["parent"] == 0 and body["head"] == 0 and body.get("best") is None
        assert body["note"] == ("head stays v0: nothing runs in this session (no cuda device here), so v2 was only "
                                "compiled; head and best move only to versions validated and timed")
        empty = (await client.call_tool("submit_kernel", {"session_id": session["session_id"], "source": EMPTY})
                 ).structured_content
        assert empty["status"] == "compiled" and empty["head"] == 0, empty
        refused = await client.call_tool("revert", {"session_id": session["session_id"], "version": 3})
        assert refused.is_error and "version 3 was only compiled (nothing ran" in refused.content[0].text
        assert "submit_kernel(parent=3)" in refused.content[0].text


@pytest.mark.parametrize(("source", "expected"), [
    ("extern \"C\" __global__ void k() {}", "no `// peak:` annotation"),
    ("// peak: entry=k grid=(N/2, 1, 1) block=(1, 1, 1)\n", "not allowed (use // for division)"),
    ("// peak: entry=k grid=(__import__('os'), 1, 1) block=(1, 1, 1)\n", "not allowed"),
    ("// peak: entry=k grid=(cdiv(N, 0), 1, 1) block=(1, 1, 1)\n", "cdiv takes two arguments"),
    ("// peak: entry=k grid=(Q, 1, 1) block=(1, 1, 1)\n", "unknown symbol 'Q'"),
    ("// peak: entry=k block=(1, 1, 1)\n", "lacks ['grid']"),
])
async def test_bad_annotations_are_explained(make_client, source: str, expected: str) -> None:
    async with make_client() as (client, _):
        session = await _session(client)
        report = (await client.call_tool("submit_kernel", {"session_id": session["session_id"],
                                                           "source": source})).structured_content
        assert report["status"] == "invalid_annotation"
        assert expected in report["message"]


@pytest.mark.parametrize(("tool", "args", "expected"), [
    ("submit_kernel", {"session_id": "nope", "source": "x"}, "unknown session 'nope'"),
    ("get_version", {"session_id": "SESSION", "version": 99}, "has no version 99"),
    ("start_session", {"problem": "fft"}, "unknown problem 'fft'"),
    ("start_session", {"backend": "metal"}, "unknown or unavailable backend 'metal'"),
    ("start_session", {"dtype": "f64"}, "dtype 'f64' is not offered"),
    ("start_session", {"sizes": {"M": -4}}, "must be a positive integer"),
    ("start_session", {"sizes": {"M": 1 << 20, "N": 1 << 20, "K": 8}}, "over the limit"),
    ("start_session", {"sizes": {"Q": 3}}, "unknown size symbol"),
    ("submit_kernel", {"session_id": "SESSION", "source": ""}, "source is empty"),
    ("submit_kernel", {"session_id": "SESSION", "source": "// peak: x\n" * 40000}, "over the 262144 limit"),
    ("revert", {"session_id": "SESSION", "version": 1}, "only passing versions"),
    ("get_transformation", {"transformation": "shared-memory-tilng"}, "shared-memory-tiling"),
    ("apply_transformation", {"session_id": "SESSION", "transformation": "no-such-thing"}, "no-such-thing"),
])
async def test_bad_input_gets_clear_errors_and_history_survives(make_client, tool, args, expected) -> None:
    async with make_client() as (client, _):
        session = await _session(client)
        await client.call_tool("submit_kernel", {"session_id": session["session_id"], "source": SYNTAX_ERROR})
        args = {k: (session["session_id"] if v == "SESSION" else v) for k, v in args.items()}
        result = await client.call_tool(tool, args)
        text = result.content[0].text if result.content else ""
        assert result.is_error, text
        assert expected in text
        rows = (await client.call_tool("history", {"session_id": session["session_id"]})).structured_content["rows"]
        assert len(rows) == 2


async def test_history_chart_diff_revert_and_persistence(make_client, settings) -> None:
    async with make_client() as (client, _):
        session = await _session(client)
        sid = session["session_id"]
        for name in ("smem_tiled.cu", "regblock_2d.cu"):
            await client.call_tool("submit_kernel", {"session_id": sid, "source": (EXAMPLES / "cuda" / name)
                                                     .read_text(), "transformation": "shared-memory-tiling"})
        history = await client.call_tool("history", {"session_id": sid, "chart": True})
        assert [c.type for c in history.content] == ["text", "image"]
        assert base64.b64decode(history.content[1].data).startswith(b"\x89PNG")
        assert "| 0 (head) |" in history.content[0].text  # compiled versions never ran: head stays on v0
        diff = whole_answer("diff", await client.call_tool("diff", {"session_id": sid, "a": 1, "b": 2}))
        assert "matmul_rb2d" in diff["diff"] and diff["diff"].startswith("--- v1")
        refused = await client.call_tool("revert", {"session_id": sid, "version": 1})
        assert refused.is_error and "only compiled (nothing ran" in refused.content[0].text
        reverted = (await client.call_tool("revert", {"session_id": sid, "version": 0})).structured_content
        assert reverted["head"] == 0
        source = whole_answer("get_version", await client.call_tool("get_version", {"session_id": sid, "version": 1}))
        assert "matmul_tiled" in source["source"]
    # A new server on the same data directory sees the whole history.
    server, service = build(settings)
    try:
        from mcp import Client

        async with Client(server) as client:
            sessions = (await client.call_tool("list_sessions", {})).structured_content["sessions"]
            assert [s["session_id"] for s in sessions] == [sid]
            rows = (await client.call_tool("history", {"session_id": sid})).structured_content["rows"]
            assert [r["version"] for r in rows] == [0, 1, 2]
            assert [r["head"] for r in rows] == [True, False, False]
            assert rows[1]["transformation"] == "shared-memory-tiling"
    finally:
        service.close()


async def test_problems_and_progress(make_client) -> None:
    events: list[str] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        events.append(message or "")

    async with make_client() as (client, _):
        problems = whole_answer("list_problems", await client.call_tool("list_problems", {"problem": "matmul"}))[
            "problems"]
        matmul = next(p for p in problems if p["name"] == "matmul")
        assert matmul["dtypes"] == ["f32", "f16", "bf16"] and "const float* A" in matmul["abi"]["cuda"]
        await client.call_tool("start_session", {"backend": "cuda", "sizes": SMALL}, progress_callback=progress)
        assert "compile" in events
