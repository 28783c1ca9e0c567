"""`serve --http` under slow, many and hostile clients (issue 19): header and body deadlines, per-address and
file-limit connection caps, a failure budget per client, and logs that neither hold the token nor flood.

Real servers as subprocesses, real sockets; every connection goes to 127.0.0.1, from loopback source addresses
(127.0.0.x) standing for distinct clients. The flood server runs with a file limit of 256, so that a few hundred
slow connections exhaust it as ~22,000 exhausted the tester's 20,000."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import resource
import secrets
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.test_http import _free_port, _wait_for_port

pytestmark = pytest.mark.anyio
INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}})
FLOOD_NOFILE = 256


@dataclass
class Server:
    port: int
    token: str
    log: Path
    process: subprocess.Popen[bytes]

    def lines(self) -> int:
        return self.log.read_bytes().count(b"\n")


@contextlib.contextmanager
def _server(folder: Path, nofile: int | None = None, **env: str) -> Iterator[Server]:
    """stdout and stderr go to one file, read at any time (a pipe nobody reads would stall a chatty server)."""
    token = secrets.token_urlsafe(32)
    port = _free_port()
    log = folder / "server.log"

    def limit() -> None:
        if nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "peak_mcp", "--data-dir", str(folder / "data"), "serve",
                                    "--http", "--port", str(port)], stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, "PEAK_MCP_TOKEN": token, **env}, preexec_fn=limit)
    try:
        _wait_for_port(port, process)  # type: ignore[arg-type]
        yield Server(port, token, log, process)
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        assert token.encode() not in log.read_bytes()  # never logged, whatever the test did


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with _server(tmp_path_factory.mktemp("quick"), PEAK_MCP_HTTP_HEADER_TIMEOUT="2",
                 PEAK_MCP_HTTP_BODY_TIMEOUT="2") as server:
        yield server


@pytest.fixture(scope="module")
def flood(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Deadlines long enough for a flood to be held through a test; the file limit low enough to exhaust."""
    with _server(tmp_path_factory.mktemp("flood"), nofile=FLOOD_NOFILE, PEAK_MCP_HTTP_HEADER_TIMEOUT="20") as server:
        yield server


def _connect_all(port: int, sources: list[str], count: int, first: bytes, timeout_s: float = 10) -> list[socket.socket]:
    """`count` connections, spread over `sources`, each sending `first`; opened 16 every 10 ms, the flood server's
    listen backlog (a burst beyond it leaves connections half-made in the kernel, resent a second later: a SYN flood,
    which is the kernel's to handle, not a slow-client flood)."""
    socks, pending = [], {}
    for i in range(count):
        if i % 16 == 15:
            time.sleep(0.01)
        s = socket.socket()
        s.bind((sources[i % len(sources)], 0))
        s.setblocking(False)
        code = s.connect_ex(("127.0.0.1", port))
        assert code in (0, errno.EINPROGRESS), os.strerror(code)
        socks.append(s)
        pending[s.fileno()] = s
    poller = select.poll()  # select() stops at descriptor 1024
    for fd in pending:
        poller.register(fd, select.POLLOUT)
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:  # a SYN the full accept queue dropped is resent after 1 s
        for fd, _ in poller.poll(500):
            poller.unregister(fd)
            with contextlib.suppress(OSError):
                pending.pop(fd).send(first)
    assert not pending, f"{len(pending)} of {count} connections never completed"
    return socks


def _still_open(socks: list[socket.socket], at_most: int = 0, wait_s: float = 0) -> int:
    """Connections the server has neither answered nor closed, once at most `at_most` are or `wait_s` has passed."""
    deadline = time.monotonic() + wait_s
    while True:
        poller = select.poll()
        for s in socks:
            poller.register(s, select.POLLIN)
        still = len(socks) - len(poller.poll(0))
        if still <= at_most or time.monotonic() >= deadline:
            return still
        time.sleep(0.1)


def _close(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()


async def _authenticated_round_trip(server: Server) -> float:
    """Seconds for a real MCP client to initialize and list tools over streamable HTTP from 127.0.0.1."""
    http_client = create_mcp_http_client(headers={"Authorization": f"Bearer {server.token}"})
    started = time.perf_counter()
    with anyio.fail_after(10):  # today's server, its descriptors exhausted, never answers
        async with http_client, Client(streamable_http_client(f"http://127.0.0.1:{server.port}/mcp",
                                                              http_client=http_client)) as client:
            tools = await client.list_tools()
            elapsed = time.perf_counter() - started
    assert "submit_kernel" in {t.name for t in tools.tools}
    return elapsed


def _request(port: int, request: bytes, source: str = "127.0.0.1") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0)) as s:
        s.sendall(request)
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := s.recv(65536):
                answer += chunk
        return answer


def _post(port: int, query: str = "", auth: str | None = None, source: str = "127.0.0.1") -> int:
    headers = f"Authorization: Bearer {auth}\r\n" if auth else ""
    answer = _request(port, (f"POST /mcp{query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{headers}"
                             f"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                             f"Connection: close\r\nContent-Length: {len(INITIALIZE)}\r\n\r\n{INITIALIZE}").encode(),
                      source)
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def test_a_bad_limit_stops_the_server_naming_its_variable(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "peak_mcp", "--data-dir", str(tmp_path), "serve", "--http", "--port",
                           str(_free_port())], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PEAK_MCP_HTTP_MAX_CONNECTIONS": "3"})
    assert done.returncode == 2 and "PEAK_MCP_HTTP_MAX_CONNECTIONS='3'" in done.stderr
    assert not (tmp_path / "peak.sqlite3").exists()  # refused before anything started


def test_slow_headers_and_slow_bodies_are_cut_off_at_their_deadlines(quick: Server) -> None:
    """A slowloris (a header line every 0.3 s, never the blank line) and an authenticated request whose body comes
    10 bytes at a time are both closed about 2 s in (PEAK_MCP_HTTP_HEADER_TIMEOUT / BODY_TIMEOUT = 2)."""
    headers = _connect_all(quick.port, ["127.0.0.2"], 1, b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")[0]
    body = _connect_all(quick.port, ["127.0.0.3"], 1, (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {quick.token}\r\n"
        f"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        f"Content-Length: 100000\r\n\r\n").encode())[0]
    started = time.monotonic()
    closed: dict[socket.socket, tuple[float, bytes]] = {}
    answers = {headers: b"", body: b""}
    try:
        while len(closed) < 2 and time.monotonic() - started < 6:
            readable, _, _ = select.select([s for s in answers if s not in closed], [], [], 0.3)
            for s in readable:
                try:
                    chunk = s.recv(4096)
                except OSError:
                    chunk = b""
                answers[s] += chunk
                if not chunk:
                    closed[s] = (time.monotonic() - started, answers[s])
            for s in answers:
                if s not in closed:
                    with contextlib.suppress(OSError):
                        s.send(b"X-Slow: 1\r\n" if s is headers else b'{"pad": 1}')
    finally:
        _close([headers, body])
    assert headers in closed and closed[headers][0] < 3.0, "a slowloris client was not cut off"
    assert closed[headers][1].startswith(b"HTTP/1.1 408")
    assert body in closed and closed[body][0] < 3.0, "a slow request body was not cut off"


async def test_slow_connections_from_one_address_leave_other_clients_answered(flood: Server) -> None:
    """300 half-open connections from 127.0.0.2, more than the server's file limit leaves: it keeps 64
    (PEAK_MCP_HTTP_MAX_CLIENT_CONNECTIONS), answers the rest 503, and an MCP client elsewhere is served in < 1 s."""
    socks = _connect_all(flood.port, ["127.0.0.2"], 300, b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1\r\n")
    try:
        assert _still_open(socks, at_most=64, wait_s=5) <= 64
        assert await _authenticated_round_trip(flood) < 1.0
        assert _still_open(socks) > 0  # the flood was still held while the client was served
    finally:
        _close(socks)


async def test_slow_connections_from_many_addresses_leave_a_client_answered(flood: Server) -> None:
    """A wider flood, 10 addresses x 40 connections, fills every connection the file limit allows; a new client's
    connection takes the place of the one that waited longest for its headers and is served in < 1 s."""
    socks = _connect_all(flood.port, [f"127.0.0.{10 + i}" for i in range(10)], 400,
                         b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1\r\n")
    try:
        _still_open(socks, at_most=FLOOD_NOFILE // 2, wait_s=5)  # the evictions land
        assert await _authenticated_round_trip(flood) < 1.0
        assert await _authenticated_round_trip(flood) < 1.0
        assert _still_open(socks) > 0  # the flood was still held
    finally:
        _close(socks)
    text = flood.log.read_text(errors="replace")
    cap = re.search(r"max_connections=(\d+)", text)  # the start-up line: what the file limit leaves
    assert cap and int(cap[1]) < FLOOD_NOFILE - 64
    assert "Too many open files" not in text


def test_a_token_in_a_query_string_is_never_logged(quick: Server) -> None:
    """uvicorn's access log printed `POST /mcp?token=<TOKEN>`; the server's own prints the path alone."""
    assert _post(quick.port, f"?token={quick.token}") == 401
    assert _post(quick.port, f"?token={quick.token}", auth=quick.token) == 200
    time.sleep(0.2)
    text = quick.log.read_text(errors="replace")
    assert "127.0.0.1 POST /mcp 401" in text and "127.0.0.1 POST /mcp 200" in text
    assert quick.token not in text


def test_logs_stay_bounded_under_a_flood_of_failures(flood: Server) -> None:
    """1,000 failures of four kinds (wrong tokens, then 429s, garbage, refused connections) from 127.0.0.30-31
    write a few lines a second, with each kind's count."""
    before = flood.lines()
    started = time.monotonic()
    statuses = [_post(flood.port, auth="x" * 43, source="127.0.0.30") for _ in range(400)]
    for _ in range(300):
        assert _request(flood.port, b"NOT HTTP AT ALL\r\n\r\n", "127.0.0.30").startswith(b"HTTP/1.1 400")
    held = _connect_all(flood.port, ["127.0.0.31"], 364, b"POST /mcp HTTP/1.1\r\n")
    try:
        time.sleep(1.5)  # a kind's count is logged a second after it falls quiet
        produced = flood.lines() - before
        elapsed = time.monotonic() - started
        assert produced <= 4 * (elapsed + 2), f"{produced} log lines in {elapsed:.1f} s"
    finally:
        _close(held)
    assert statuses[:30] == [401] * 30 and set(statuses[30:]) == {429}  # PEAK_MCP_HTTP_AUTH_FAILURES_PER_MINUTE
    time.sleep(1.0)
    text = flood.log.read_text(errors="replace")
    assert _counted(text, "127.0.0.30 POST /mcp 401") == 30
    assert _counted(text, "127.0.0.30 POST /mcp 429") == 370
    assert _counted(text, "Invalid HTTP request received.") == 300


def _counted(log: str, kind: str) -> int:
    """The records of a kind: its lines, plus the drops each counts (`[N more like this dropped ...]` before it;
    `[N like this ..., this one the last]` for a report that stands for N)."""
    total = 0
    for line in log.splitlines():
        if kind in line:
            found = re.search(r"\[(\d+) (more )?like this", line)
            total += 1 if not found else int(found[1]) + (1 if found[2] else 0)
    return total


def test_a_client_that_keeps_failing_gets_429_and_others_do_not(flood: Server) -> None:
    """30 wrong tokens a minute from one address (PEAK_MCP_HTTP_AUTH_FAILURES_PER_MINUTE), then 429 for the rest
    of the minute, its right token included; each answer closes its connection. Another address is not affected."""
    statuses = [_post(flood.port, auth="x" * 43, source="127.0.0.40") for _ in range(35)]
    assert statuses == [401] * 30 + [429] * 5
    assert _post(flood.port, auth=flood.token, source="127.0.0.40") == 429
    answer = _request(flood.port, b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "127.0.0.40")
    assert answer.startswith(b"HTTP/1.1 429") and b"retry-after: " in answer.lower()
    assert b"connection: close" in answer.lower()
    assert _post(flood.port, auth=flood.token, source="127.0.0.41") == 200


def test_the_throttle_counts_what_it_drops_and_shortens_repeated_tracebacks(monkeypatch: pytest.MonkeyPatch) -> None:
    """In process, on a clock the test moves: LogThrottle on a handler, records from one call site."""
    from peak_mcp.api import http_limits

    clock = [0.0]
    monkeypatch.setattr(http_limits, "time", SimpleNamespace(monotonic=lambda: clock[0], sleep=time.sleep))
    throttle = http_limits.LogThrottle(interval_s=1000.0)  # its reporter sleeps 250 s: the test calls report()
    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append  # type: ignore[method-assign]
    handler.addFilter(throttle)
    logger = logging.getLogger("test.throttle")
    logger.addHandler(handler)
    logger.propagate = False

    def fail(i: int) -> None:
        try:
            raise OSError(24, "Too many open files")
        except OSError:
            logger.exception("accept failed %d", i)

    try:
        for i in range(500):
            fail(i)
        clock[0] = 1001.0
        for i in range(500, 504):
            fail(i)
        clock[0] = 2002.0
        throttle.report()
    finally:
        logger.removeHandler(handler)
    lines = [r.getMessage() for r in seen]
    assert len(lines) == 3, lines
    assert seen[0].exc_info and lines[0] == "accept failed 0"
    assert seen[1].exc_info is None  # the same exception again: its last line only
    assert lines[1] == ("accept failed 500 (OSError: [Errno 24] Too many open files) "
                        "[499 more like this dropped in the last 1001.0 s]")
    assert lines[2] == "accept failed 503 [3 like this in the last 1001.0 s, this one the last]"
