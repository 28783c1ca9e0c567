"""Soak: several HTTP clients submit kernels while the server is killed with SIGKILL and restarted on the same data
dir; then the database is checked against what the clients were told.

    python tools/soak.py [--submissions 300] [--clients 4] [--backend cuda] [--kill-at 0.5]

Loopback only. Sessions are compile-only CUDA (or HLSL where a Vulkan device is present and --backend hlsl).
Prints one JSON summary: attempted, acknowledged, client errors, acknowledged versions missing from SQLite
(lost: must be 0), versions still pending after the restart (must be 0), seconds. Exit status 1 when either
invariant fails. Bounded: every loop has a count and the whole run a deadline.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from peak_mcp.api.responses import whole_answer

ROOT = Path(__file__).resolve().parent.parent
SIZES = {"M": 64, "N": 64, "K": 64}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(data_dir: Path, port: int, log: Any) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    process = subprocess.Popen([sys.executable, "-m", "peak_mcp", "--data-dir", str(data_dir), "serve", "--http",
                                "--host", "127.0.0.1", "--port", str(port)], stdout=log, stderr=log, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}; see its log")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return process
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("the server did not listen within 60 s")


class Soak:
    def __init__(self, args: argparse.Namespace, data_dir: Path) -> None:
        self.args = args
        self.data_dir = data_dir
        self.port = _free_port()
        self.log = open(data_dir / "server.log", "ab")  # noqa: SIM115 - closed in run()
        self.server: subprocess.Popen[bytes] | None = None
        self.attempted = 0
        self.acknowledged: list[tuple[str, int, str]] = []  # (session, version, tag in the source)
        self.errors: list[str] = []
        self.killed_at: int | None = None
        self.restarted = anyio.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def _source(self, naive: str, tag: str) -> str:
        return naive + f"\n// soak {tag}\n"

    async def _client(self, number: int, session_id: str, naive: str, deadline: float) -> None:
        while self.attempted < self.args.submissions and time.monotonic() < deadline:
            try:
                async with Client(self.url, read_timeout_seconds=120) as client:
                    while self.attempted < self.args.submissions and time.monotonic() < deadline:
                        self.attempted += 1
                        tag = f"c{number}-{self.attempted}"
                        await self._maybe_kill()
                        result = await client.call_tool("submit_kernel", {"session_id": session_id,
                                                                          "source": self._source(naive, tag)})
                        if result.is_error:
                            self.errors.append(result.content[0].text[:200])
                            continue
                        self.acknowledged.append((session_id, result.structured_content["version"], tag))
            except Exception as exc:  # the server died under us: wait for it, reconnect
                self.errors.append(f"{type(exc).__name__}: {str(exc)[:160]}")
                with anyio.move_on_after(90):
                    await self.restarted.wait()

    async def _maybe_kill(self) -> None:
        if self.killed_at is None and self.attempted >= int(self.args.submissions * self.args.kill_at):
            self.killed_at = self.attempted
            assert self.server is not None
            self.server.send_signal(signal.SIGKILL)  # mid-flight: other clients' submissions are in the worker
            self.server.wait()
            await anyio.sleep(0.5)
            self.server = await anyio.to_thread.run_sync(_start, self.data_dir, self.port, self.log)
            self.restarted.set()

    async def run(self) -> dict[str, Any]:
        started = time.monotonic()
        deadline = started + self.args.max_seconds
        self.server = _start(self.data_dir, self.port, self.log)
        try:
            async with Client(self.url, read_timeout_seconds=300) as client:
                begun = await client.call_tool("start_session", {"backend": self.args.backend, "sizes": SIZES})
                if begun.is_error:
                    raise RuntimeError(begun.content[0].text)
                session_id = begun.structured_content["session_id"]
                naive = whole_answer("get_version", await client.call_tool(
                    "get_version", {"session_id": session_id, "version": 0}))["source"]
            async with anyio.create_task_group() as tasks:
                for number in range(self.args.clients):
                    tasks.start_soon(self._client, number, session_id, naive, deadline)
        finally:
            if self.server is not None and self.server.poll() is None:
                self.server.terminate()
                self.server.wait(timeout=30)
            self.log.close()
        return self._audit(session_id, time.monotonic() - started)

    def _audit(self, session_id: str, seconds: float) -> dict[str, Any]:
        db = sqlite3.connect(self.data_dir / "peak.sqlite3")
        rows = {(s, n): (status, source) for s, n, status, source in
                db.execute("SELECT session_id, number, status, source FROM versions")}
        pending = db.execute("SELECT COUNT(*) FROM versions WHERE status = 'pending'").fetchone()[0]
        interrupted = db.execute("SELECT COUNT(*) FROM versions WHERE failure = 'interrupted'").fetchone()[0]
        db.close()
        lost = [(s, n, tag) for s, n, tag in self.acknowledged
                if (s, n) not in rows or f"// soak {tag}" not in rows[(s, n)][1]]
        return {"submissions_attempted": self.attempted, "acknowledged": len(self.acknowledged),
                "client_errors": len(self.errors), "error_samples": sorted(set(self.errors))[:5],
                "killed_after_attempts": self.killed_at, "records_in_sqlite": len(rows), "lost": len(lost),
                "pending_after_restart": pending, "interrupted": interrupted, "seconds": round(seconds, 1),
                "data_dir": str(self.data_dir)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=300)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--backend", default="cuda", choices=["cuda", "hlsl"])
    parser.add_argument("--kill-at", type=float, default=0.5, help="fraction of submissions before kill -9")
    parser.add_argument("--max-seconds", type=float, default=900)
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="peak-soak-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    summary = anyio.run(Soak(args, data_dir).run)
    print(json.dumps(summary, indent=2))
    return 0 if summary["lost"] == 0 and summary["pending_after_restart"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
