"""The server's side of problem hosts: start one for an untrusted problem file and a worker, hand the worker its
end of the socket, and take the host down with the worker (peak_mcp.runner.problem_host says what a host is)."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field

from peak_mcp.confine.child_env import child_environment
from peak_mcp.confine.isolated import python_command, safe_cwd
from peak_mcp.confine.isolation import pids_in
from peak_mcp.confine.sandbox import (
    SYSTEM_READ,
    Policy,
    confined_command,
    gpu_device_nodes,
    python_runtime_paths,
    tool_paths,
)
from peak_mcp.problems.declaration import ProblemDeclaration

DEFAULT_MEMORY_BYTES = 8 << 30  # Settings.problem_memory_mb's default
HOST_MAX_PROCESSES = 256  # tasks (threads count): torch's and numpy's pools, inductor compiling in-process


@dataclass
class HostProcess:
    process: subprocess.Popen[bytes]
    scratch: str
    tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=20))

    def alive(self) -> bool:
        return self.process.poll() is None

    def members(self) -> list[int]:
        """The host's processes, its launcher left out: those of the PID namespace the launcher made, or the host
        itself where the launcher made none (it then became the host)."""
        launcher = self.process.pid
        try:
            namespace = os.readlink(f"/proc/{launcher}/ns/pid_for_children")
            if namespace == os.readlink(f"/proc/{launcher}/ns/pid"):
                return [launcher]
        except OSError:
            return []
        return pids_in(namespace)

    def pause(self) -> None:
        """Stopped between the jobs that need it: a file's code that keeps running in the background (a thread
        spinning the GPU or the CPUs) would disturb the timing of other sessions' kernels. Its launcher runs on, so
        the tree still dies with the server."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, signum: int) -> None:
        if self.alive():
            for pid in self.members():
                with contextlib.suppress(OSError):
                    os.kill(pid, signum)

    def kill(self) -> None:
        """The launcher's group, and with the launcher the namespace: everything the file started."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        shutil.rmtree(self.scratch, ignore_errors=True)


def host_policy(declaration: ProblemDeclaration, scratch: str, gpu: bool, memory_bytes: int) -> Policy:
    """What a host may reach: the runtime and the file read-only, its scratch folder writable, and where
    its worker has a GPU, the device nodes and /proc (cuInit writes under /proc/self; /proc/sys is read-only in the
    host's mount namespace and the host has no capability, so that grant reaches nothing of the machine's)."""
    write: tuple[str, ...] = (scratch, "/dev/null")
    if gpu:
        write += ("/proc", *gpu_device_nodes())
    # The file alone: its declaration carries its NAIVE texts, and the files beside it may be other clients' (the
    # data dir's defined problems).
    return Policy(read=(*SYSTEM_READ, *python_runtime_paths(), *tool_paths(), declaration.path),
                  write=write, isolate=True, max_processes=HOST_MAX_PROCESSES, cgroup_memory_bytes=memory_bytes,
                  address_space_fallback=not gpu, no_sockets=True, unix_sockets=gpu)


def start_host(declaration: ProblemDeclaration, backend: str, index: int, sandbox: bool, python: str = sys.executable,
               memory_bytes: int = DEFAULT_MEMORY_BYTES) -> tuple[HostProcess, socket.socket]:
    """A host for `declaration` on the worker's device, and the worker's end of its socket (the caller hands it to
    the worker and closes its own copy)."""
    scratch = tempfile.mkdtemp(prefix="peak-problem-host-", dir=safe_cwd())
    declaration_file = os.path.join(scratch, "declaration.json")
    with open(declaration_file, "w") as handle:
        handle.write(declaration.model_dump_json())
    worker_end, host_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    gpu = backend in ("cuda", "hip") and index >= 0
    command = python_command(python, "peak_mcp.runner.problem_host", "--socket-fd", str(host_end.fileno()),
                             "--declaration", declaration_file, "--backend", backend, "--device", str(index))
    env = child_environment({"HOME": scratch, "TMPDIR": scratch, "XDG_CACHE_HOME": os.path.join(scratch, "cache"),
                             "CUPY_CACHE_DIR": os.path.join(scratch, "cupy"),
                             "TRITON_CACHE_DIR": os.path.join(scratch, "triton"),
                             "TORCHINDUCTOR_CACHE_DIR": os.path.join(scratch, "inductor"),
                             "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                             # torch.compile's yardstick compiles in the host, not in a pool of processes
                             "TORCHINDUCTOR_COMPILE_THREADS": "1"})
    try:
        policy = host_policy(declaration, scratch, gpu, memory_bytes)
        process = subprocess.Popen(confined_command(policy, command, sandbox),
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   pass_fds=(host_end.fileno(),), env=env, cwd=scratch, start_new_session=True)
    except OSError:
        worker_end.close()
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    finally:
        host_end.close()
    host = HostProcess(process, scratch)
    threading.Thread(target=_drain, args=(host,), daemon=True).start()
    return host, worker_end


def _drain(host: HostProcess) -> None:
    """What the file prints, kept as a short tail for the log; never a full pipe that blocks the host."""
    assert host.process.stdout is not None
    for raw in iter(lambda: host.process.stdout.read1(1 << 16), b""):  # type: ignore[union-attr]
        host.tail.extend(raw.decode(errors="replace").splitlines()[-20:])


def hand_over(control: socket.socket, declaration: ProblemDeclaration, worker_end: socket.socket) -> None:
    """Give the worker its end of a host's socket, keyed by the file it runs."""
    key = json.dumps({"path": declaration.path, "sha256": declaration.sha256}).encode()
    try:
        socket.send_fds(control, [key + b"\n"], [worker_end.fileno()])
    finally:
        worker_end.close()
