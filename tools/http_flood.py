"""Flood `peak-mcp serve --http` with slow half-open connections on loopback and measure what a real client sees.

Reproduces issue 19's report at a bounded scale: a server with a bearer token and a file limit (`--nofile`), then
`--connections` connections from `--sources` loopback addresses (127.0.0.2, 127.0.0.3, ...), each sending a request
line and one more header line every `--interval` s, never finishing its headers. While they are held, an
authenticated `initialize` is sent from 127.0.0.1 once a second and timed. Printed at the end: the flood
connections the server still holds, the server's open file descriptors, the authenticated requests' latency, the
log lines and bytes the server wrote, its `Too many open files` lines, and whether a token sent in a query string
(once before the flood, once during it) reached the log.

    python tools/http_flood.py --connections 5000 --sources 20 --nofile 4096 --duration 30
    PYTHONPATH=/path/to/other/checkout python tools/http_flood.py ...   # the same flood against other code

Everything goes to 127.0.0.0/8 only; the flood is bounded in count (--connections <= 18000) and time
(--duration <= 120 s) and stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "flood-probe", "version": "0"}}})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, token: str, nofile: int, log: Path, data_dir: Path) -> subprocess.Popen[bytes]:
    def limit() -> None:  # in the child, before exec: the server's file limit, soft and hard
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    env = {**os.environ, "PEAK_MCP_TOKEN": token}
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "peak_mcp", "--data-dir", str(data_dir), "serve", "--http",
                                    "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, env=env,
                                   preexec_fn=limit)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return process
        time.sleep(0.2)
    process.kill()
    raise SystemExit("the server did not listen within 60 s")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time the process has used (Linux: /proc/PID/stat, in clock ticks)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


async def authenticated_request(port: int, token: str, query: str = "",
                                timeout_s: float = 15.0) -> tuple[int, float, float]:
    """(status, seconds, seconds to connect) of one `initialize` POST, read to its end; status 0 when no answer came
    in timeout_s. Connecting takes a second or more when the kernel dropped the SYN (a full accept queue)."""
    started = time.perf_counter()
    connected = float("nan")
    request = (f"POST /mcp{query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
               f"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
               f"Connection: close\r\nContent-Length: {len(INITIALIZE)}\r\n\r\n{INITIALIZE}").encode()
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            connected = time.perf_counter() - started
            try:
                writer.write(request)
                status_line = await reader.readline()
                await reader.read()  # the whole answer (Connection: close)
            finally:
                writer.close()
        status = int(status_line.split()[1]) if status_line.startswith(b"HTTP/") else 0
        return status, time.perf_counter() - started, connected
    except (TimeoutError, OSError, ValueError, IndexError):
        return 0, time.perf_counter() - started, connected


class Flood:
    """Slow half-open connections: a request line, then one header line every `interval` s, never the blank line.
    Each of `connections` slots reconnects when the server closes it, as an attacker would; opening is paced to
    `rate` a second in all."""

    def __init__(self, port: int, sources: list[str], interval: float, rate: float) -> None:
        self.port, self.sources, self.interval, self.rate = port, sources, interval, rate
        self.opened = self.failed = self.closed_by_server = 0
        self.open_now = 0
        self._next_open = time.monotonic()

    async def _paced(self) -> None:
        now = time.monotonic()
        self._next_open = max(self._next_open, now) + 1.0 / self.rate
        await asyncio.sleep(self._next_open - now)

    async def slot(self, index: int, stop: asyncio.Event) -> None:
        source = self.sources[index % len(self.sources)]
        while not stop.is_set():
            await self._paced()
            if stop.is_set():
                return
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(
                    "127.0.0.1", self.port, local_addr=(source, 0)), 10)
            except (OSError, TimeoutError):
                self.failed += 1
                continue
            self.opened += 1
            self.open_now += 1
            try:
                await self._dribble(reader, writer, stop)
            except OSError:
                self.closed_by_server += 1
            finally:
                self.open_now -= 1
                writer.close()

    async def _dribble(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, stop: asyncio.Event) -> None:
        writer.write(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n".encode())
        line = 0
        while not stop.is_set():
            try:
                # the server's answer (a 408/503) or its close ends the connection; a timeout is the next tick
                data = await asyncio.wait_for(reader.read(4096), self.interval)
            except TimeoutError:
                line += 1
                writer.write(f"X-Slow-{line}: {'x' * 20}\r\n".encode())
                continue
            if not data:
                self.closed_by_server += 1
                return


async def run(args: argparse.Namespace) -> dict[str, object]:
    token = secrets.token_urlsafe(32)
    port = free_port()
    work = Path(tempfile.mkdtemp(prefix="http-flood-"))
    log = work / "server.log"
    server = start_server(port, token, args.nofile, log, work / "data")
    result: dict[str, object] = {"connections": args.connections, "sources": args.sources, "nofile": args.nofile,
                                 "duration_s": args.duration}
    try:
        await asyncio.sleep(1.0)
        status, seconds, _ = await authenticated_request(port, token)
        result["idle_latency_ms"] = round(seconds * 1000, 1)
        result["idle_status"] = status
        result["idle_fds"] = open_fds(server.pid)
        # A token in a query string, before and during the flood: it must never reach the log.
        status, _, _ = await authenticated_request(port, token, query=f"?token={token}")
        result["query_token_status_idle"] = status
        log_before = log.stat().st_size
        lines_before = log.read_bytes().count(b"\n")
        cpu_before = cpu_seconds(server.pid)

        flood = Flood(port, [f"127.0.0.{2 + i}" for i in range(args.sources)], args.interval, args.rate)
        stop = asyncio.Event()
        started = time.monotonic()
        tasks = [asyncio.create_task(flood.slot(i, stop)) for i in range(args.connections)]
        latencies: list[float] = []
        connects: list[float] = []
        unanswered = 0
        other_statuses: dict[int, int] = {}  # of the unanswered: 0 when no answer came within 15 s
        peak_fds = peak_open = 0
        next_probe = started + 1.0
        while time.monotonic() - started < args.duration:
            await asyncio.sleep(0.05)
            peak_fds = max(peak_fds, open_fds(server.pid))
            peak_open = max(peak_open, flood.open_now)
            if time.monotonic() >= next_probe:
                status, seconds, connect = await authenticated_request(port, token)
                connects.append(connect)
                if status == 200:
                    latencies.append(seconds)
                else:
                    unanswered += 1
                    other_statuses[status] = other_statuses.get(status, 0) + 1
                next_probe = time.monotonic() + 1.0
        held_at_end = flood.open_now
        server_cpu = cpu_seconds(server.pid) - cpu_before
        fds_at_end = open_fds(server.pid)
        status, _, _ = await authenticated_request(port, token, query=f"?token={token}")
        stop.set()
        await asyncio.wait(tasks, timeout=30)
        for task in tasks:
            task.cancel()
        await asyncio.sleep(1.0)
        data = log.read_bytes()
        flood_log = data[log_before:]
        result.update({
            "opened": flood.opened, "failed_to_connect": flood.failed,
            "closed_by_server": flood.closed_by_server, "held_peak": peak_open, "held_at_end": held_at_end,
            "server_fds_peak": peak_fds, "server_fds_at_end": fds_at_end,
            "server_cpu_s": round(server_cpu, 1), "opened_per_s": round(flood.opened / args.duration),
            "auth_requests": len(latencies) + unanswered, "auth_unanswered": unanswered,
            "auth_unanswered_statuses": other_statuses,
            "auth_latency_ms_median": round(statistics.median(latencies) * 1000, 1) if latencies else None,
            "auth_latency_ms_max": round(max(latencies) * 1000, 1) if latencies else None,
            "auth_requests_over_1s": sum(seconds > 1.0 for seconds in latencies),
            "auth_connect_ms_max": round(max(connects) * 1000, 1) if connects else None,
            "log_lines": data.count(b"\n") - lines_before, "log_bytes": len(flood_log),
            "too_many_open_files": flood_log.count(b"Too many open files"),
            "token_in_log": token.encode() in data, "query_token_status_flood": status,
        })
        return result
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        if args.keep_log:
            result["log"] = str(log)
        else:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=5000,
                        help="slow connections to keep open, reopened when closed (at most 18000)")
    parser.add_argument("--sources", type=int, default=20, help="loopback source addresses (127.0.0.2, ...)")
    parser.add_argument("--nofile", type=int, default=4096, help="the server's RLIMIT_NOFILE, soft and hard")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds the flood lasts (at most 120)")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between a connection's header lines")
    parser.add_argument("--rate", type=float, default=2000.0, help="new connections a second, at most")
    parser.add_argument("--keep-log", action="store_true",
                        help="keep the server's log and data dir and print the log's path")
    args = parser.parse_args()
    if not (1 <= args.connections <= 18000 and 1 <= args.sources <= 250 and 0 < args.duration <= 120):
        parser.error("bounded: --connections 1..18000, --sources 1..250, --duration up to 120 s")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # this process holds every flood connection
    if soft < args.connections + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, args.connections + 256), hard))
    result = asyncio.run(run(args))
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
