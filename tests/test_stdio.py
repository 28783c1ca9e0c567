"""The server as a subprocess over stdio, as Claude Desktop or Code would run it."""

from __future__ import annotations

import os
import sys

import pytest
from mcp import Client, StdioServerParameters

pytestmark = pytest.mark.anyio


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
