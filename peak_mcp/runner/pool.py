"""One long-lived worker process per device, a FIFO queue per device, and a deadline on every job.

The MCP process never touches a GPU: it talks to workers over pipes. A worker that stays silent past the
inactivity deadline (a hung kernel) is killed; one that dies (a faulting kernel) is reaped; either way the job
gets a clear error and the next job starts a fresh worker.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from peak_mcp.confine.child_env import child_environment
from peak_mcp.confine.isolated import python_command, safe_cwd
from peak_mcp.confine.sandbox import Policy, confined_command
from peak_mcp.core.errors import PeakError, busy_note
from peak_mcp.problems.base import PROBLEM_CODE
from peak_mcp.problems.code import is_shipped
from peak_mcp.runner.messages import Job
from peak_mcp.runner.ownership import DeviceLocks, DeviceOwned
from peak_mcp.runner.problem_hosts import DEFAULT_MEMORY_BYTES, HostProcess, hand_over, start_host
from peak_mcp.runner.replies import (
    Done,
    Failed,
    Fatal,
    JobResult,
    MalformedReply,
    ProgressNote,
    Ready,
    Reply,
    parse_reply,
)

log = structlog.get_logger("peak_mcp.pool")
Progress = Callable[[str], None]
POLL_S = 0.2  # how often a waiting job looks at its cancel token
WORKER_MAX_PROCESSES = 4096  # tasks: compile threads, NVRTC children, sanitizer runs; under root, a pids cgroup
# Problem hosts kept per device, the least recently used stopped past it: each holds a device context and its file's
# models, and sessions come and go (a batch of problems left one per file alive). A session's next job starts its
# host again, as after a crash.
MAX_HOSTS_PER_DEVICE = 3
# The cancel token of the request this thread serves; set by the MCP layer, so the domain layer in between needs no
# parameter for it. anyio.to_thread.run_sync runs the call in a copy of the caller's context.
CANCEL: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("peak_mcp_cancel", default=None)


@contextlib.contextmanager
def cancellation(event: threading.Event) -> Iterator[None]:
    token = CANCEL.set(event)
    try:
        yield
    finally:
        CANCEL.reset(token)


class _Cancelled(Exception):
    pass


class JobFailed(PeakError):
    """The worker could not finish the job (hang, crash, internal error)."""

    def __init__(self, kind: str, message: str, hint: str | None = None, stage: str = "") -> None:
        super().__init__(message, hint)
        self.kind = kind
        self.stage = stage  # the worker's last progress message: what it was doing


@dataclass
class _Worker:
    backend: str
    index: int  # -1 = compile only
    process: subprocess.Popen[bytes] | None = None
    results: io.FileIO | None = None  # the worker's reply pipe
    buffer: bytes = b""
    stderr_tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=40))
    next_id: int = 0
    stage: str = ""  # last progress message of the job in flight
    control: socket.socket | None = None  # hands the worker its problem hosts' sockets
    sandbox: bool = False  # started isolated: its problem hosts are too
    hosts: dict[tuple[str, str], HostProcess] = field(default_factory=dict)  # by (problem file, sha256)
    killed: bool = False  # its group was killed and the leader reaped: its pid may belong to another process now

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


# What a waiting job is told it waits behind (DeviceQueues.turn), by job type.
JOB_KINDS = {"evaluate": "a submission's validation and timing", "generality": "a submission's checks at other sizes",
             "tune": "a tune", "profile": "a profile",
             "prepare": "drawing a session's input sets and references ahead of its submissions"}


class DeviceQueues:
    """One queue per (backend, device index): its jobs run one at a time, and placement reads how many wait or run.
    Shared by the embedded pool and the Ray pool."""

    def __init__(self) -> None:
        self._locks: dict[tuple[str, int], threading.Lock] = collections.defaultdict(threading.Lock)
        self._guard = threading.Lock()
        self._queued: collections.Counter[tuple[str, int]] = collections.Counter()  # waiting or running jobs
        self._running: dict[tuple[str, int], str] = {}  # the type of the job holding each device

    def length(self, key: tuple[str, int]) -> int:
        with self._guard:
            return self._queued[key]

    @contextlib.contextmanager
    def turn(self, key: tuple[str, int], cancel: threading.Event | None, job_type: str = "",
             progress: Progress | None = None) -> Iterator[None]:
        """Wait for the device's turn (the OS lock serves waiters); a cancelled waiter leaves the queue. A waiter is
        told once what it waits behind (`progress`): the kind of job, never whose."""
        with self._guard:
            lock = self._locks[key]
            self._queued[key] += 1
        try:
            told = False
            while not lock.acquire(timeout=POLL_S):
                if cancel is not None and cancel.is_set():
                    raise JobFailed("cancelled", "the request was cancelled while the job waited for the device")
                if progress is not None and not told:
                    told = True
                    with self._guard:
                        running = self._running.get(key)
                    progress(f"waiting for the device: it is busy with {JOB_KINDS.get(running or '', 'another job')}")
            with self._guard:
                self._running[key] = job_type
            try:
                yield
            finally:
                with self._guard:
                    self._running.pop(key, None)
                lock.release()
        finally:
            with self._guard:
                self._queued[key] -= 1


    @contextlib.contextmanager
    def quietly(self, key: tuple[str, int]) -> Iterator[None]:
        """The device's lock without joining its queue: a worker started ahead of any job leaves the device idle
        to placement and tuning (they read queue lengths), and a job waits until the start is done."""
        with self._guard:
            lock = self._locks[key]
        with lock:
            yield


class DevicePool:
    """Runs jobs on workers keyed by (backend, device index). Thread-safe; one job at a time per device."""

    def __init__(self, *, start_timeout_s: float = 120.0, python: str = sys.executable,
                 env: dict[str, str] | None = None, lock_dir: Path | None = None,
                 options: Callable[[str, int], dict[str, Any]] | None = None) -> None:
        self.start_timeout_s = start_timeout_s
        self.options = options or (lambda _backend, _index: {})  # the executor's keyword arguments, per worker
        self.device_locks = DeviceLocks(lock_dir) if lock_dir is not None else None
        self.python = python
        self.env = env
        self._workers: dict[tuple[str, int], _Worker] = {}
        self.queues = DeviceQueues()
        self.restarts = 0
        self.closed = False

    def queue_length(self, backend: str, index: int) -> int:
        """Jobs waiting for or running on one device: what placement balances."""
        return self.queues.length((backend, index))

    def run(self, backend: str, index: int, job: Job, *, inactivity_s: float, total_s: float,
            progress: Progress | None = None, cancel: threading.Event | None = None) -> JobResult:
        """Run one job. `cancel` (default: the calling request's token), once set, kills the job and its worker:
        JobFailed('cancelled')."""
        key = (backend, index)
        cancel = cancel if cancel is not None else CANCEL.get()
        with self.queues.turn(key, cancel, getattr(job, "type", ""), progress):
            worker = self._live_worker(backend, index)
            try:
                self._host_for(worker, job)
                return self._exchange(worker, job, inactivity_s, total_s, progress, cancel)
            except JobFailed as exc:
                exc.stage = worker.stage
                raise
            finally:
                for host in worker.hosts.values():  # no problem file's code runs while another job is timed
                    host.pause()

    def warm(self, backend: str, index: int) -> None:
        """Start the device's worker ahead of its first job (a tune's helper devices: their start took 4 s of a
        tune's first batch); never raises: the first job starts it, or says why it cannot."""
        key = (backend, index)
        try:
            with self.queues.quietly(key):
                self._live_worker(backend, index)
        except Exception as exc:  # a device another server owns, a worker that did not start
            log.info("worker not started ahead", backend=backend, device=index, reason=str(exc)[:200])

    def _live_worker(self, backend: str, index: int) -> _Worker:
        """The device's worker, started where there is none or it died (held under the device's lock); none once the
        pool is closed (a job that waited for the device while it closed)."""
        if self.closed:
            raise JobFailed("cancelled", "the server is closing: no job starts now")
        key = (backend, index)
        worker = self._workers.get(key)
        if worker is None or not worker.alive():
            if worker is not None:  # died between jobs: its problem hosts, pipes and group go with it
                self._kill(worker)
            worker = self._start(backend, index)
            if self.closed:  # closed while it started: close() did not see it
                self._kill(worker)
                raise JobFailed("cancelled", "the server is closing: no job starts now")
            self._workers[key] = worker
        return worker

    def close(self) -> None:
        self.closed = True
        for worker in list(self._workers.values()):
            self._kill(worker)
        self._workers.clear()
        if self.device_locks is not None:
            self.device_locks.release_all()

    # --- internals -------------------------------------------------------------------------------------------
    def _start(self, backend: str, index: int) -> _Worker:
        if self.device_locks is not None and index >= 0:
            try:
                self.device_locks.acquire(backend, index)  # held by this server for its life
            except DeviceOwned as exc:
                raise JobFailed("device_busy", str(exc), "stop the other server, or give this one another "
                                "--data-dir (each data dir's server owns its devices).") from None
        read_fd, write_fd = os.pipe()
        control, worker_control = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = child_environment(environ=self.env)
        options = self.options(backend, index)
        confinement = options.get("confinement")
        command = python_command(self.python, "peak_mcp.runner.worker", "--backend", backend, "--device", str(index),
                                 "--result-fd", str(write_fd), "--control-fd", str(worker_control.fileno()),
                                 "--parent-pid", str(os.getpid()), "--options", json.dumps(options))
        sandbox = bool(confinement and confinement.get("sandbox", True))
        if confinement is not None:  # a server's worker: isolated by the launcher; it applies Landlock itself
            command = confined_command(Policy(isolate=True, max_processes=WORKER_MAX_PROCESSES), command,
                                       enabled=sandbox, landlock=False)
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,  # kernel printf
            pass_fds=(write_fd, worker_control.fileno()), env=env, start_new_session=True, cwd=safe_cwd(),
        )
        os.close(write_fd)
        worker_control.close()
        worker = _Worker(backend, index, process, os.fdopen(read_fd, "rb", buffering=0), control=control,
                         sandbox=sandbox)
        threading.Thread(target=self._drain_output, args=(worker,), daemon=True).start()
        log.info("worker started", backend=backend, device=index, pid=process.pid)
        try:
            ready = self._read_message(worker, self.start_timeout_s)
        except MalformedReply as exc:
            ready = Fatal(error=f"its first message was not a reply this server reads: {exc}")
        if not isinstance(ready, Ready):
            reason = ready.error if isinstance(ready, Fatal) else self._death_note(worker)
            self._kill(worker)
            raise JobFailed("worker_start", f"the {backend} worker for device {index} did not start: {reason}",
                            "run the doctor tool to see what is missing on this machine.")
        return worker

    def _host_for(self, worker: _Worker, job: Job) -> None:
        """An untrusted problem file's code runs in a problem host of its own, never in the worker: start one for
        this worker where it has none alive, and hand the worker its socket before the job goes out."""
        declaration = job.declaration
        if declaration is None or is_shipped(declaration) or worker.control is None:
            return
        key = (declaration.path, declaration.sha256)
        host = worker.hosts.pop(key, None)  # put back last: the dict's order is least recently used first
        if host is not None and host.alive():
            worker.hosts[key] = host
            host.resume()
            return
        if host is not None:
            host.kill()
        for old in list(worker.hosts)[:max(0, len(worker.hosts) + 1 - MAX_HOSTS_PER_DEVICE)]:  # before the new one
            worker.hosts.pop(old).kill()  # starts: its device memory is free by then
            log.info("problem host stopped (least recently used)", file=old[0], device=worker.index)
        try:
            memory = self.options(worker.backend, worker.index).get("problem_memory_bytes", DEFAULT_MEMORY_BYTES)
            # this interpreter: `self.python` runs workers (a stand-in's in tests), not problem code
            host, worker_end = start_host(declaration, worker.backend, worker.index, worker.sandbox,
                                          memory_bytes=memory)
            hand_over(worker.control, declaration, worker_end)
        except OSError as exc:
            raise JobFailed("problem_error", f"cannot start the process that runs {declaration.path}: {exc}",
                            "run the doctor tool to see what is missing on this machine.") from None
        worker.hosts[key] = host
        log.info("problem host started", file=declaration.path, pid=host.process.pid, device=worker.index)

    def _drain_output(self, worker: _Worker) -> None:
        """Read the worker's stdout and stderr (kernel printf, tracebacks) as fast as the pipe fills, keeping only
        the last lines for error messages: a kernel that floods printf must never block its worker on a full
        pipe (line-by-line reading managed ~150k lines/s, less than a printf flood writes)."""
        assert worker.process is not None and worker.process.stdout is not None
        fd, pending = worker.process.stdout.fileno(), b""
        while chunk := os.read(fd, 1 << 20):
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()[-4096:]
            for raw in lines[-worker.stderr_tail.maxlen:]:  # type: ignore[misc]
                worker.stderr_tail.append(raw.decode(errors="replace").rstrip()[:500])
        if pending:
            worker.stderr_tail.append(pending.decode(errors="replace").rstrip()[:500])

    def _read_message(self, worker: _Worker, timeout_s: float,
                      cancel: threading.Event | None = None) -> Reply | None:
        """Next reply, or None on timeout or EOF (check worker.alive() to tell which); _Cancelled when `cancel` is
        set meanwhile; MalformedReply for a line that is not a reply."""
        assert worker.results is not None
        deadline = time.monotonic() + timeout_s
        while b"\n" not in worker.buffer:
            if cancel is not None and cancel.is_set():
                raise _Cancelled
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([worker.results], [], [], min(remaining, POLL_S))
            if not ready:
                continue
            chunk = os.read(worker.results.fileno(), 1 << 16)
            if not chunk:  # EOF: the worker is exiting; reap it, or a death reads as a hang (alive() still true)
                if worker.process is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        worker.process.wait(timeout=5)
                return None
            worker.buffer += chunk
        line, _, worker.buffer = worker.buffer.partition(b"\n")
        return parse_reply(line)

    def _exchange(self, worker: _Worker, job: Job, inactivity_s: float, total_s: float,
                  progress: Progress | None, cancel: threading.Event | None = None) -> JobResult:
        worker.next_id += 1
        job_id = worker.next_id
        assert worker.process is not None and worker.process.stdin is not None
        try:
            worker.process.stdin.write((json.dumps({**job.model_dump(mode="json"), "id": job_id}) + "\n").encode())
            worker.process.stdin.flush()
        except BrokenPipeError:
            self._kill(worker)
            raise JobFailed("worker_died", f"the worker died before the job started: {self._death_note(worker)}",
                            "submit again; a fresh worker starts automatically.") from None
        started = time.monotonic()
        last_stage = worker.stage = "start"
        while True:
            budget = min(inactivity_s, total_s - (time.monotonic() - started))
            try:
                message = self._read_message(worker, max(budget, 0.0), cancel)
            except _Cancelled:
                self._kill(worker)
                self.restarts += 1
                raise JobFailed("cancelled", f"the request was cancelled during '{last_stage}'; the job was stopped "
                                "and its worker restarted.") from None
            except MalformedReply as exc:
                self._kill(worker)  # whatever it sends next is as suspect: a fresh worker takes the next job
                self.restarts += 1
                raise JobFailed("internal", f"internal error: the worker's reply during '{last_stage}' does not match "
                                f"what this server reads ({exc}); the job was stopped and its worker restarted.",
                                "this is a bug in peak-mcp (or a worker from another installed version), not in the "
                                "kernel: submit again, and report it if it repeats.") from None
            if message is None:
                if worker.alive():
                    self._kill(worker)
                    self.restarts += 1
                    elapsed = time.monotonic() - started
                    if elapsed >= total_s and PROBLEM_CODE in last_stage:
                        raise JobFailed(
                            "problem_error",
                            f"the problem's own code, not the kernel, was still running after {elapsed:.0f} s (the "
                            f"limit for one job) during '{last_stage}' and was stopped; the worker was restarted.",
                            "fix the problem file (its inputs or reference take too long at these sizes), or raise "
                            "PEAK_MCP_JOB_MAX_SECONDS on a slow machine.")
                    if elapsed >= total_s:
                        raise JobFailed(
                            "timeout",
                            f"the job was still running after {elapsed:.0f} s (the limit for one job, during "
                            f"'{last_stage}') and was stopped. The worker was restarted.",
                            "check smaller sizes first; on a slow device (a CPU Vulkan driver) raise "
                            "PEAK_MCP_JOB_MAX_SECONDS.")
                    if PROBLEM_CODE in last_stage:
                        raise JobFailed(
                            "problem_error",
                            f"the problem's own code, not the kernel, made no progress for {inactivity_s:.0f} s "
                            f"during '{last_stage}' and was stopped; the worker was restarted.",
                            "fix the problem file (its inputs or reference never finish at these sizes), or raise "
                            "PEAK_MCP_JOB_TIMEOUT on a slow machine.")
                    raise JobFailed(
                        "timeout",
                        f"the job reported no progress for {inactivity_s:.0f} s during '{last_stage}', the limit "
                        f"PEAK_MCP_JOB_TIMEOUT sets, and was stopped; the worker was restarted. Either one launch "
                        f"takes longer than that on this machine (a slow device such as a CPU Vulkan driver, large "
                        f"sizes, or other work competing for the cores{busy_note()}), or the kernel never finishes "
                        f"(a loop whose exit condition is never met, a barrier not every thread reaches).",
                        f"on a slow or busy machine raise PEAK_MCP_JOB_TIMEOUT (now {inactivity_s:.0f} s; e.g. "
                        f"PEAK_MCP_JOB_TIMEOUT={max(120, int(inactivity_s * 4))}) or use smaller sizes; if the same "
                        "kernel finishes at smaller sizes it is the machine. Otherwise check loop bounds and that "
                        "every thread reaches every barrier.")
                self._kill(worker)
                self.restarts += 1
                raise JobFailed("worker_died", f"the worker died during '{last_stage}': {self._death_note(worker)}. "
                                "The worker was restarted.",
                                "the kernel probably crashed the device context: check bounds on every access.")
            if not isinstance(message, ProgressNote | Done | Failed) or message.id != job_id:
                continue  # not about this job
            if isinstance(message, ProgressNote):
                last_stage = worker.stage = message.message
                if progress:
                    progress(last_stage)
                continue
            if isinstance(message, Done):
                if message.result.type != job.type:
                    raise JobFailed("internal", f"internal error: the worker answered a {job.type} job with a "
                                    f"{message.result.type} result")
                return message.result
            if message.fatal:
                self._kill(worker)
                self.restarts += 1
                raise JobFailed(message.kind, message.error,
                                "the worker was restarted; fix the kernel and submit again.")
            raise JobFailed(message.kind, message.error)

    def _death_note(self, worker: _Worker) -> str:
        code = worker.process.poll() if worker.process else None
        if code is not None and code < 0:
            note = f"killed by signal {signal.Signals(-code).name}"
        else:
            note = f"exit code {code}"
        tail = [line for line in worker.stderr_tail if line.strip()][-6:]
        return note + (": " + " | ".join(tail) if tail else "")

    def _kill(self, worker: _Worker) -> None:
        for host in worker.hosts.values():
            host.kill()
        worker.hosts.clear()
        if worker.control is not None:
            worker.control.close()
            worker.control = None
        if worker.process is None or worker.killed:  # killed before (close() after a failed job): never again
            return
        worker.killed = True
        # The group, even when its leader has died: a worker that crashed leaves its sanitizer runs behind otherwise
        # (they run beside generality's sizes). A group with members left keeps its id; none left: nothing to kill.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker.process.pid, signal.SIGKILL)
        try:
            worker.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log.warning("worker did not exit after SIGKILL", pid=worker.process.pid)
        if worker.results is not None:
            worker.results.close()
            worker.results = None
        if worker.process.stdin:
            worker.process.stdin.close()
