"""`serve --http` is safe to expose: a token off loopback, 401 without it, foreign Host/Origin refused.

Every request goes to 127.0.0.1; 0.0.0.0 is bound only to check the refusal and, with a token, the bind itself."""

from __future__ import annotations

import http.client
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.test_http import _free_port, _wait_for_port

pytestmark = pytest.mark.anyio
INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}})


def _serve(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "peak_mcp", "--data-dir", str(tmp_path / "data"), "serve", "--http",
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def _stop(process: subprocess.Popen[str]) -> str:
    process.terminate()
    try:
        return process.communicate(timeout=30)[1]
    except subprocess.TimeoutExpired:
        process.kill()
        return process.communicate()[1]


def _post(port: int, headers: dict[str, str]) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        connection.request("POST", "/mcp", body=INITIALIZE, headers={**base, **headers})
        response = connection.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        connection.close()


@pytest.fixture
def token(tmp_path: Path) -> str:
    value = secrets.token_urlsafe(32)
    (tmp_path / "token").write_text(value + "\n")
    return value


@pytest.fixture
def exposed(tmp_path: Path, token: str) -> Iterator[tuple[int, subprocess.Popen[str]]]:
    """A server bound to 0.0.0.0 with a token and one extra allowed host; reached only through 127.0.0.1."""
    port = _free_port()
    process = _serve(tmp_path, "--host", "0.0.0.0", "--port", str(port), "--token-file", str(tmp_path / "token"),
                     "--allowed-host", "gpu.example.org", "--allowed-origin", "https://gpu.example.org")
    try:
        _wait_for_port(port, process)
        yield port, process
    finally:
        stderr = _stop(process)
        assert token not in stderr  # never logged


def test_non_loopback_bind_without_token_refuses_to_start(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PEAK_MCP_TOKEN"}
    done = subprocess.run([sys.executable, "-m", "peak_mcp", "--data-dir", str(tmp_path), "serve", "--http",
                           "--host", "0.0.0.0", "--port", str(_free_port())], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 2
    assert "not loopback" in done.stderr and "--token-file" in done.stderr and "PEAK_MCP_TOKEN" in done.stderr
    assert not (tmp_path / "peak.sqlite3").exists()  # refused before anything started


def test_short_token_is_refused_without_echoing_it(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "peak_mcp", "--data-dir", str(tmp_path), "serve", "--http",
                           "--host", "0.0.0.0", "--port", str(_free_port())], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PEAK_MCP_TOKEN": "hunter2"})
    assert done.returncode == 2 and "at least 16 characters" in done.stderr and "hunter2" not in done.stderr


def test_missing_or_wrong_token_gets_401(exposed, token: str) -> None:
    port, _ = exposed
    assert _post(port, {})[0] == 401
    assert _post(port, {"Authorization": "Bearer " + "x" * len(token)})[0] == 401
    assert _post(port, {"Authorization": token})[0] == 401  # no scheme
    status, body = _post(port, {"Authorization": f"Bearer {token}x"})
    assert status == 401 and token not in body
    assert _post(port, {"Authorization": f"Bearer {token}"})[0] == 200


def test_foreign_host_and_origin_are_refused_on_every_bind(exposed, token: str, tmp_path: Path) -> None:
    port, _ = exposed
    auth = {"Authorization": f"Bearer {token}"}
    assert _post(port, {**auth, "Host": "evil.example.com"})[0] in (403, 421)
    assert _post(port, {**auth, "Host": "gpu.example.org"})[0] == 200  # --allowed-host
    assert _post(port, {**auth, "Origin": "http://evil.example.com"})[0] == 403
    assert _post(port, {**auth, "Origin": "https://gpu.example.org"})[0] == 200  # --allowed-origin
    # a loopback bind without a token: the same checks (DNS rebinding)
    loopback = _free_port()
    process = _serve(tmp_path, "--port", str(loopback), env={"PEAK_MCP_TOKEN": ""})
    try:
        _wait_for_port(loopback, process)
        assert _post(loopback, {"Host": "evil.example.com"})[0] in (403, 421)
        assert _post(loopback, {"Origin": "http://evil.example.com"})[0] == 403
        assert _post(loopback, {"Origin": f"http://localhost:{loopback}"})[0] == 200
    finally:
        _stop(process)


async def test_the_right_token_gives_a_working_mcp_session(exposed, token: str) -> None:
    port, _ = exposed
    http_client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http_client, Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp",
                                                          http_client=http_client)) as client:
        problems = await client.call_tool("list_problems", {})
        assert problems.structured_content["problems"][0]["name"] == "matmul"
        assert {t.name for t in (await client.list_tools()).tools} >= {"submit_kernel", "start_session"}
