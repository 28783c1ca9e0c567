"""The server as a subprocess over streamable HTTP (`peak-mcp serve --http`), bound to loopback by default."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from mcp import Client

pytestmark = pytest.mark.anyio


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen[str], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1]
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"the server did not listen on port {port} within {timeout_s} s")


async def test_http_session_round_trip(tmp_path) -> None:
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "peak_mcp", "--data-dir", str(tmp_path), "serve", "--http",
                                "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PEAK_MCP_BENCH_SECONDS": "0.1"})
    try:
        _wait_for_port(port, process)
        async with Client(f"http://127.0.0.1:{port}/mcp", read_timeout_seconds=300) as client:
            problems = await client.call_tool("list_problems", {})
            assert problems.structured_content["problems"][0]["name"] == "matmul"
            started = await client.call_tool("start_session", {"backend": "cuda", "sizes": {"M": 8, "N": 8, "K": 8}})
            assert not started.is_error, started.content[0].text
            sid = started.structured_content["session_id"]
            missing = await client.call_tool("diff", {"session_id": sid, "a": 3})
            assert missing.is_error and "has no version 3" in missing.content[0].text
            listed = await client.call_tool("list_sessions", {})
            assert [s["session_id"] for s in listed.structured_content["sessions"]] == [sid]
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=30)
    assert f"http://127.0.0.1:{port}" in stderr  # loopback unless --host says otherwise
    assert (tmp_path / "peak.sqlite3").exists()
