"""NVRTC in child processes, so that a compile is confined and bounded like any other compiler.

NVRTC is a library: in the worker it would read files with the worker's rights and allocate without limit (a 1 KB
macro bomb took a worker to 4.4 GB). Each compile is therefore sent to a small persistent child process that
confined itself at start (`confined.CompileLimits`: Landlock, address space) and sets its CPU-time limit before
each compile; the worker keeps a few such children warm (one per concurrent build thread) and gets the cubin back.
A child that dies or runs past the wall-clock limit is killed and replaced; the compile is a `resources` error.

Protocol: one JSON line per request on the child's stdin ({source, options}), one per reply on its stdout
({ok, cubin (base64), log} or {ok: false, error}).
"""

from __future__ import annotations

import base64
import collections
import contextlib
import dataclasses
import hashlib
import io
import json
import os
import resource
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from peak_mcp.backends import confined
from peak_mcp.backends.base import CompileFailed
from peak_mcp.confine.sandbox import confine, python_runtime_paths


class _Child:
    def __init__(self, include_dirs: list[str]) -> None:
        bounds = confined.limits()
        self.scratch = tempfile.mkdtemp(prefix="peak-nvrtc-")
        policy = bounds.policy([*include_dirs, *python_runtime_paths()], [self.scratch])
        policy = dataclasses.replace(policy, cpu_seconds=None)  # per compile, set by the child itself
        from peak_mcp.confine.isolated import python_command

        self.process = subprocess.Popen(
            python_command(sys.executable, "peak_mcp.backends.nvrtc_child", policy.to_json(),
                           str(bounds.cpu_seconds), "1" if bounds.sandbox else "0"),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=self.scratch, env={**os.environ, "TMPDIR": self.scratch})

    def compile(self, request: dict[str, Any], wall_seconds: float) -> dict[str, Any] | str:
        """The child's reply, or which limit it hit: it died (CPU time, memory) or went past `wall_seconds`."""
        assert self.process.stdin is not None and self.process.stdout is not None
        bounds = confined.limits()
        try:
            self.process.stdin.write(json.dumps(request).encode() + b"\n")
            self.process.stdin.flush()
        except OSError:
            return self._death(bounds)
        deadline = time.monotonic() + wall_seconds
        reply = b""
        fd = self.process.stdout.fileno()
        while not reply.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.kill()
                return f"wall-clock ({wall_seconds:g} s: it timed out)"
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return self._death(bounds)
            reply += chunk
        return json.loads(reply)

    def _death(self, bounds: confined.CompileLimits) -> str:
        """The limit a dead child hit: SIGXCPU is the CPU limit; an abort or a kill, an allocation that failed."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        if self.process.returncode == -signal.SIGXCPU:
            return bounds.cpu
        return f"{bounds.memory}; it died with status {self.process.returncode}"

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()
        self.process.wait()


class NvrtcChildren:
    """A pool of warm NVRTC children; `compile` may be called from several threads at once."""

    KEPT = 16  # compiled modules remembered: a submission's evaluate and generality jobs compile the same source

    def __init__(self) -> None:
        self._idle: list[_Child] = []
        self._lock = threading.Lock()
        self._compiled: collections.OrderedDict[str, tuple[bytes, str]] = collections.OrderedDict()

    def compile(self, source: str, options: dict[str, Any], source_name: str) -> tuple[bytes, str]:
        """(cubin, NVRTC log) for `source` compiled with cuda.core ProgramOptions(**options); CompileFailed with the
        raw NVRTC error text (the caller cleans it), or with reason `resources`. The same source and options compile
        once: a Hopper kernel takes NVRTC 7 s, and the jobs of one submission would pay it each (the include
        folders are the server's own, so the same text always gives the same module)."""
        key = hashlib.sha256(json.dumps([source, options, source_name], sort_keys=True).encode()).hexdigest()
        with self._lock:
            if key in self._compiled:
                self._compiled.move_to_end(key)
                return self._compiled[key]
        compiled = self._compile(source, options, source_name)
        with self._lock:
            self._compiled[key] = compiled
            while len(self._compiled) > self.KEPT:
                self._compiled.popitem(last=False)
        return compiled

    def _compile(self, source: str, options: dict[str, Any], source_name: str) -> tuple[bytes, str]:
        with self._lock:
            child = self._idle.pop() if self._idle else None
        if child is None or not child.alive():
            child = _Child(options.get("include_path") or [])
        bounds = confined.limits()
        reply = child.compile({"source": source, "options": options}, bounds.wall_seconds)
        if isinstance(reply, str):
            raise confined.resources_exceeded("NVRTC", reply, source_name)
        with self._lock:
            self._idle.append(child)
        if reply.get("resources"):
            raise confined.resources_exceeded("NVRTC", bounds.memory, source_name)
        if not reply["ok"]:
            raise CompileFailed(reply["error"])
        return base64.b64decode(reply["cubin"]), reply["log"]

    def close(self) -> None:
        with self._lock:
            children, self._idle = self._idle, []
        for child in children:
            child.kill()


def main() -> int:
    """The child: confine, then compile each request until stdin closes."""
    from peak_mcp.confine.sandbox import Policy

    policy_json, cpu_seconds, sandbox = sys.argv[1:4]
    confine(Policy.from_json(policy_json), landlock=sandbox == "1")
    from cuda.core import Program, ProgramOptions

    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write to the reply pipe
    for line in sys.stdin.buffer:
        request = json.loads(line)
        used = resource.getrusage(resource.RUSAGE_SELF)
        # Soft limit only: SIGXCPU ends this child when a compile runs past its share; the next child starts fresh.
        resource.setrlimit(resource.RLIMIT_CPU, (int(used.ru_utime + used.ru_stime) + int(cpu_seconds),
                                                 resource.RLIM_INFINITY))
        log = io.StringIO()
        try:
            module = Program(request["source"], code_type="c++",
                             options=ProgramOptions(**request["options"])).compile("cubin", logs=log)
            reply: dict[str, Any] = {"ok": True, "cubin": base64.b64encode(module.code).decode(),
                                     "log": log.getvalue()}
        except MemoryError:
            reply = {"ok": False, "resources": True, "error": "out of memory"}
        except Exception as exc:
            text = str(exc)
            # NVRTC reports an allocation that failed under the limit as `catastrophic error: out of memory`.
            reply = {"ok": False, "resources": bool(confined.OUT_OF_MEMORY.search(text)), "error": text}
        out.write(json.dumps(reply).encode() + b"\n")
        out.flush()
    return 0

