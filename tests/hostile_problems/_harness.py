"""Drives the hostile problem files (this folder) through a real MCP client; shared by
tests/test_hostile_problems.py and tools/hostile_problems.py.

A run (`Run`) plants canaries: secret environment variables for the server, files under a fake home, a victim
session whose kernel holds a canary, listeners a probe may reach (TCP standing in for the HTTP transport, UDP, an
abstract unix socket). Every path of a run holds its mark (`peak-hostile-run-...`), so the kill probes touch only
processes of this run's server tree and the cleanup kills only what this run started. No canary value is in any
path: a path a response names is never a false leak.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]")
MAX_ANSWER_CHARS = 256 * 1024  # a response bigger than this carried a problem file's flood
ROW_SUM_KERNEL = """// peak: entry=main groups=(cdiv(ROWS, 64), 1, 1)
// {canary}: the victim's kernel, which no other client may read
struct Params {{ uint ROWS; uint COLS; }};
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;
[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID)
{{
    if (id.x >= p.ROWS) return;
    float s = 0.0;
    for (uint c = 0; c < p.COLS; ++c) s += x[id.x * p.COLS + c];
    y[id.x] = s;
}}
"""
VICTIM_PROBLEM = '''"""Victim: y = 3 x."""
NAME = "victim_scale"
SIZES = {{"N": 64}}
INPUTS = {{"x": ("N",)}}
OUTPUTS = {{"y": ("N",)}}
_secret = "{canary}"  # in the file only: no answer to its owner shows it


def reference(x):
    return 3 * x
'''
# Starts `peak_mcp serve` from whatever tree PYTHONPATH names, with describe's timeout shortened
# (PEAK_HOSTILE_DESCRIBE_S) where the tree has the constant and the registry takes it.
LAUNCHER = r"""
import inspect, os, sys
t = float(os.environ.get("PEAK_HOSTILE_DESCRIBE_S") or 0)
if t:
    try:
        import peak_mcp.problems.registry as r
        if hasattr(r, "DESCRIBE_TIMEOUT_S"):
            r.DESCRIBE_TIMEOUT_S = t
        init = r.ProblemRegistry.__init__
        if "timeout_s" in inspect.signature(init).parameters:
            def patched(self, *a, **k):
                k.setdefault("timeout_s", t)
                init(self, *a, **k)
            r.ProblemRegistry.__init__ = patched
    except Exception as exc:
        print("hostile launcher: describe timeout not patched:", exc, file=sys.stderr)
sys.argv[0] = "peak_mcp"
try:
    from peak_mcp.api.cli import main
except ImportError:  # a tree from before the layered layout (a baseline run)
    from peak_mcp.cli import main
main(sys.argv[1:])
"""


@dataclass
class Probe:
    name: str
    path: Path
    variants: tuple[str, ...]
    flags: dict[str, str]

    @property
    def kills(self) -> bool:
        return "kills" in self.flags

    @property
    def slow(self) -> bool:
        return "slow" in self.flags


def probes() -> list[Probe]:
    found = []
    for path in sorted(HERE.glob("[a-z]*.py")):
        header = re.search(r"^# hostile: (.*)$", path.read_text(), re.M)
        if not header:
            continue
        words = dict(w.partition("=")[::2] for w in header.group(1).split())
        variants = tuple(words.pop("variants").split(","))
        found.append(Probe(path.stem, path, variants, words))
    return found


def probe(name: str) -> Probe:
    return next(p for p in probes() if p.name == name)


@dataclass
class Listener:
    """TCP, UDP and abstract-unix listeners: what reached them."""

    hits: list[str] = field(default_factory=list)
    tcp_port: int = 0
    udp_port: int = 0
    abstract: str = ""

    def start(self, mark: str) -> None:
        self.abstract = f"{mark}-unix"
        tcp = socket.socket()
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(16)
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind(("127.0.0.1", 0))
        unix = socket.socket(socket.AF_UNIX)
        unix.bind("\0" + self.abstract)
        unix.listen(16)
        self.tcp_port, self.udp_port = tcp.getsockname()[1], udp.getsockname()[1]
        self._sockets = (tcp, udp, unix)

        def accept(s: socket.socket, what: str) -> None:
            while True:
                try:
                    conn, _ = s.accept()
                    conn.settimeout(2)
                    data = conn.recv(200)
                    conn.close()
                except OSError:
                    return
                self.hits.append(f"{what}:{data[:60]!r}")

        def receive() -> None:
            while True:
                try:
                    data = udp.recv(200)
                except OSError:
                    return
                self.hits.append(f"udp:{data[:60]!r}")

        for target in (lambda: accept(tcp, "tcp"), receive, lambda: accept(unix, "unix")):
            threading.Thread(target=target, daemon=True).start()

    def close(self) -> None:
        for s in getattr(self, "_sockets", ()):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


class Run:
    """One run's canaries, folders and listeners."""

    def __init__(self, base: Path | None = None) -> None:
        self.mark = f"peak-hostile-run-{secrets.token_hex(4)}"
        self.base = Path(tempfile.mkdtemp(prefix=self.mark + "-", dir=base))
        self.rid = secrets.token_hex(8)  # in every canary value, in no path
        self.canaries = {
            "env PEAK_MCP_TOKEN": f"canary-token-{self.rid}",
            "env SECRET_CANARY": f"canary-secret-{self.rid}",
            "env AWS_SECRET_ACCESS_KEY": f"canary-aws-{self.rid}",
            "file ~/.ssh/id_rsa": f"canary-sshkey-{self.rid}",
            "file ~/secret.txt": f"canary-file-{self.rid}",
            "victim kernel": f"canary-kernel-{self.rid}",
            "victim problem": f"canary-problem-{self.rid}",
        }
        self.home = self.base / "home"
        (self.home / ".ssh").mkdir(parents=True)
        (self.home / ".ssh" / "id_rsa").write_text(f"-----BEGIN KEY-----\n{self.canaries['file ~/.ssh/id_rsa']}\n")
        (self.home / "secret.txt").write_text(self.canaries["file ~/secret.txt"] + "\n")
        for path in (self.home / ".ssh" / "id_rsa", self.home / "secret.txt"):
            path.chmod(0o600)
        self.listener = Listener()
        self.listener.start(self.mark)
        self.core_pattern = read_core_pattern()
        self.servers = 0

    def env(self) -> dict[str, str]:
        """The server's environment: this process's, the canaries, the fake home."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PEAK_MCP_")}
        env.update({k.split()[1]: v for k, v in self.canaries.items() if k.startswith("env ")})
        env.update(HOME=str(self.home), PEAK_MCP_BENCH_SECONDS="0.1", PEAK_MCP_JOB_TIMEOUT="10",
                   PEAK_MCP_SANITIZER="false", PEAK_HOSTILE_DESCRIBE_S="8", PEAK_MCP_PROBLEM_MEMORY_MB="2048")
        return env

    def render(self, probe: Probe, variant: str) -> str:
        """The probe's text for one variant, placeholders filled; its NAME gets the variant (shadows keep theirs)."""
        text = probe.path.read_text()
        text = re.sub(r'^where = "\w+"', f'where = "{variant}"', text, count=1, flags=re.M)
        if "shadow" not in probe.flags and "kernelbench" not in probe.flags:
            text = re.sub(r'^NAME = "(\w+)"', lambda m: f'NAME = "{m.group(1)}_{variant}"', text, count=1, flags=re.M)
        return (text.replace("@RUN_MARK@", self.mark).replace("@CANARY_DIR@", str(self.home))
                .replace("@TCP_PORT@", str(self.listener.tcp_port)).replace("@UDP_PORT@", str(self.listener.udp_port))
                .replace("@ABSTRACT@", self.listener.abstract))

    def problem_name(self, probe: Probe, variant: str) -> str:
        m = re.search(r'^NAME = "(\w+)"', self.render(probe, variant), re.M)
        return m.group(1) if m else probe.name

    def leaks(self, text: str) -> list[str]:
        """The canaries `text` holds (the run id alone counts: a canary cut short is still a leak)."""
        found = [what for what, value in self.canaries.items() if value in text]
        return found or (["a canary (cut short)"] if self.rid in text else [])

    def pwned_files(self) -> list[str]:
        """Files a write probe left outside its scratch: /tmp, this run's folders."""
        found = [str(p) for p in Path(tempfile.gettempdir()).glob("peak-pwned-*")]
        found += [str(p) for p in Path("/tmp").glob("peak-pwned-*") if str(p) not in found]
        return found + [str(p) for p in self.base.rglob("peak-pwned-*")]

    def cleanup(self) -> None:
        kill_marked(self.mark)
        for path in self.pwned_files():
            with contextlib.suppress(OSError):
                os.unlink(path)

    def close(self) -> None:
        self.cleanup()
        self.listener.close()
        shutil.rmtree(self.base, ignore_errors=True)


def read_core_pattern() -> str:
    try:
        return Path("/proc/sys/kernel/core_pattern").read_text()
    except OSError:
        return ""


def kill_marked(mark: str) -> list[int]:
    """SIGKILL every process whose command line holds `mark` (this run's servers, workers, daemons, forks)."""
    killed = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            line = Path(f"/proc/{entry}/cmdline").read_bytes().decode("utf-8", "replace")
        except OSError:
            continue
        if mark in line:
            with contextlib.suppress(OSError):
                os.kill(int(entry), signal.SIGKILL)
                killed.append(int(entry))
    return killed


def answer_text(result: Any) -> str:
    """Everything a tool answer carries back to the client, as one string."""
    import json

    parts = [getattr(c, "text", "") or "" for c in getattr(result, "content", []) or []]
    if getattr(result, "structured_content", None) is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


@dataclass
class Row:
    probe: str
    step: str
    text: str
    leaked: list[str]
    up: bool | None = None
    notes: list[str] = field(default_factory=list)

    def shown(self) -> str:
        text = self.text[self.text.find("PROBE["):] if "PROBE[" in self.text else self.text
        first = " ".join(text.split(" "))[:120].replace("\n", " ")
        first = CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", first).replace("|", "\\|")
        leaked = f"**LEAKED {', '.join(self.leaked)}** " if self.leaked else ""
        notes = f" _[{'; '.join(self.notes)}]_" if self.notes else ""
        return f"{leaked}{first}{notes}"


def judge(run: Run, probe: str, step: str, text: str) -> Row:
    row = Row(probe, step, text, run.leaks(text))
    if CONTROL.search(text):
        row.notes.append("control characters reached the client")
    if len(text) > MAX_ANSWER_CHARS:
        row.notes.append(f"{len(text)} chars")
    if re.search(r"\b(KILLED|FORKED|ALLOCATED|WROTE|OPENED-FOR-WRITE|CONNECTED|READ) ", text):
        row.notes.append("probe reports success: " + ", ".join(sorted(set(re.findall(
            r"\b(KILLED|FORKED|ALLOCATED|WROTE|OPENED-FOR-WRITE|CONNECTED|READ) ", text)))))
    return row


@contextlib.asynccontextmanager
async def stdio_server(run: Run, tree: str | None = None, problems: Path | None = None,
                       timeout: float = 120) -> AsyncIterator[Any]:
    """A `peak_mcp serve` subprocess over stdio, from `tree` (None: the installed package), with this run's
    environment, data dir and (optionally) a --problems folder; yields the client."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    run.servers += 1
    data = run.base / f"data{run.servers}"
    cwd = run.base / f"cwd{run.servers}"
    cwd.mkdir()
    env = run.env()
    if tree:
        env["PYTHONPATH"] = os.pathsep.join([tree, *filter(None, [env.get("PYTHONPATH")])])
    args = ["-c", LAUNCHER, "--data-dir", str(data), "serve"]
    if problems is not None:
        args += ["--problems", str(problems)]
    params = StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(cwd))
    errlog = open(run.base / f"server{run.servers}.stderr", "w")  # noqa: SIM115
    try:
        async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=timeout) as client:
            yield client
    finally:
        errlog.close()


async def call(client: Any, tool: str, args: dict[str, Any], timeout: float) -> tuple[str, Any]:
    """(text of the answer or of what went wrong, the result or None)."""
    import anyio

    try:
        with anyio.fail_after(timeout):
            result = await client.call_tool(tool, args)
    except TimeoutError:
        return f"NO ANSWER within {timeout:g} s", None
    except Exception as exc:  # the server died, the transport closed
        return f"CALL FAILED: {type(exc).__name__}: {exc}", None
    return answer_text(result), result


async def is_up(client: Any, timeout: float = 30) -> bool:
    _, result = await call(client, "list_problems", {}, timeout)
    return result is not None and not result.is_error


async def start_victim(run: Run, client: Any, timeout: float = 120) -> list[Row]:
    """Another client's work in the same server: a defined problem and a row_sum session whose kernel holds a
    canary."""
    rows = []
    text, _ = await call(client, "define_problem",
                         {"source": VICTIM_PROBLEM.format(canary=run.canaries["victim problem"])}, timeout)
    rows.append(Row("victim", "define_problem", text, []))
    text, _ = await call(client, "start_session", {
        "problem": "row_sum", "backend": "hlsl", "sizes": {"ROWS": 64, "COLS": 100},
        "reference_kernel": ROW_SUM_KERNEL.format(canary=run.canaries["victim kernel"])}, timeout)
    rows.append(Row("victim", "start_session row_sum", text, []))
    return rows


async def exercise(run: Run, client: Any, probe: Probe, variant: str, *, via: str, timeout: float = 60,
                   session: bool = True) -> list[Row]:
    """One probe variant through one server: define_problem (via='define'), or already in its --problems folder
    (via='folder'); then list_problems, and where the variant runs in the worker or carries the naive kernel,
    start_session and get_version of v0."""
    rows: list[Row] = []
    label = f"{probe.name}:{variant}"
    name = run.problem_name(probe, variant)
    if via == "define":
        text, _ = await call(client, "define_problem", {"source": run.render(probe, variant)}, timeout)
        rows.append(judge(run, label, "define_problem", text))
    text, _ = await call(client, "list_problems", {}, timeout)
    rows.append(judge(run, label, "list_problems", text))
    if session and variant in ("reference", "naive", "title"):
        text, result = await call(client, "start_session", {"problem": name, "backend": "hlsl",
                                                            "sizes": {"N": 1000}}, timeout)
        rows.append(judge(run, label, "start_session", text))
        sid = (getattr(result, "structured_content", None) or {}).get("session_id")
        if sid and variant == "naive":
            text, _ = await call(client, "get_version", {"session_id": sid, "version": 0}, timeout)
            rows.append(judge(run, label, "get_version v0", text))
    return rows


async def probe_once(run: Run, probe: Probe, variant: str, *, tree: str | None, via: str = "define",
                     victim: bool = False, timeout: float = 60) -> list[Row]:
    """A fresh stdio server for one probe variant; the last row says whether the server still answers."""
    folder = None
    if via == "folder":
        folder = run.base / f"problems-{probe.name}-{variant}"
        folder.mkdir()
        (folder / f"{probe.name}.py").write_text(run.render(probe, variant))
    rows: list[Row] = []
    try:
        async with stdio_server(run, tree, folder, timeout=timeout + 30) as client:
            if victim:
                rows += await start_victim(run, client)
            rows += await exercise(run, client, probe, variant, via=via, timeout=timeout,
                                   session=not probe.kills or variant == "reference")
            up = await is_up(client)
            rows[-1].up = up
            if victim:  # the victim's session is still readable by its owner, and nobody else saw it
                text, _ = await call(client, "list_sessions", {}, timeout)
                rows.append(judge(run, f"{probe.name}:{variant}", "list_sessions", text))
                rows[-1].up = up
    except Exception as exc:  # the server died under us
        rows.append(Row(f"{probe.name}:{variant}", "server", f"{type(exc).__name__}: {exc}", [], up=False))
    finally:
        run.cleanup()
    if run.listener.hits:
        rows[-1].notes.append(f"listeners reached: {run.listener.hits}")
        run.listener.hits.clear()
    pwned = run.pwned_files()
    if pwned:
        rows[-1].notes.append(f"files written: {pwned}")
    if read_core_pattern() != run.core_pattern:
        rows[-1].notes.append("CORE_PATTERN CHANGED")
    return rows


def wait_gone(mark: str, seconds: float = 5) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end and kill_marked(mark):
        time.sleep(0.2)
