"""The server as a subprocess over stdio, as Claude Desktop or Code would run it."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading

import pytest
from mcp import Client, StdioServerParameters


@pytest.mark.anyio
async def test_stdio_session_round_trip(tmp_path) -> None:
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "peak_mcp", "--data-dir", str(tmp_path), "serve"],
                                   env={**os.environ, "PEAK_MCP_BENCH_SECONDS": "0.1"})
    async with Client(params, read_timeout_seconds=300) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"start_session", "submit_kernel", "apply_transformation"} <= names
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        assert "optimize_kernel" in prompts
        resources = (await client.list_resources()).resources
        assert any(str(r.uri) == "transformation://shared-memory-tiling" for r in resources)
        text = await client.read_resource("transformation://shared-memory-tiling")
        assert "shared" in text.contents[0].text.lower()
        started = await client.call_tool("start_session", {"backend": "cuda", "sizes": {"M": 32, "N": 32, "K": 32}})
        assert not started.is_error, started.content[0].text
        sid = started.structured_content["session_id"]
        bad = await client.call_tool("get_version", {"session_id": sid, "version": 7})
        assert bad.is_error and "has no version 7" in bad.content[0].text
        history = await client.call_tool("history", {"session_id": sid})
        assert history.structured_content["rows"][0]["version"] == 0
    assert (tmp_path / "peak.sqlite3").exists()


def test_unreadable_lines_get_a_json_rpc_error_and_the_server_reads_on(tmp_path) -> None:
    """Each line the transport cannot read used to get no answer (the client waited out its own timeout): now a
    parse error, or an invalid request with the id it carried, within seconds; then the session goes on."""
    server = subprocess.Popen([sys.executable, "-m", "peak_mcp", "--data-dir", str(tmp_path), "serve"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    replies: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=lambda: [replies.put(line) for line in server.stdout], daemon=True).start()

    def exchange(line: str, timeout: float = 5.0) -> dict:
        server.stdin.write(line.encode() + b"\n")
        server.stdin.flush()
        try:
            return json.loads(replies.get(timeout=timeout))
        except queue.Empty:
            pytest.fail(f"no reply within {timeout} s to {line[:60]!r}")

    try:
        assert exchange('{"jsonrpc": "2.0", "id": 0, "method": "ping"}', timeout=120)["result"] == {}  # it is up
        for bad in ('{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "\\ud800"}}',  # lone surrogate
                    "[" * 100_000 + "]" * 100_000, "not json", '{"jsonrpc": "2.0", "id": 1, "method": "ping"'):
            reply = exchange(bad)
            assert reply["id"] is None and reply["error"]["code"] == -32700, reply
            assert reply["error"]["message"] == "Parse error"
        server.stdin.write(b"\n")  # a blank line is no message: no answer, and the next reply is the next call's
        reply = exchange('{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": "x"}')
        assert reply["id"] == 7 and reply["error"]["code"] == -32600, reply
        assert exchange('{"jsonrpc": "2.0", "id": 8, "result": 1, "error": 2, "x": [')["error"]["code"] == -32700
        initialize = {"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
        reply = exchange(json.dumps(initialize))
        assert reply["id"] == 2 and reply["result"]["serverInfo"]["name"] == "peak-mcp", reply
        server.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        reply = exchange('{"jsonrpc": "2.0", "id": 3, "method": "tools/list"}')
        assert "start_session" in {tool["name"] for tool in reply["result"]["tools"]}
    finally:
        server.kill()
        server.wait(timeout=30)
