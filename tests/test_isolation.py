"""The sandbox launcher's isolation and the problem-host wire: what a confined child can no longer reach, and frames
a lying problem host cannot use to make its worker read or allocate without bound."""

from __future__ import annotations

import itertools
import json
import os
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from peak_mcp.confine.child_env import child_environment
from peak_mcp.confine.sandbox import (
    SYSTEM_READ,
    Policy,
    confined_command,
    landlock_abi,
    probe_protections,
    python_runtime_paths,
)
from peak_mcp.core.text_safety import clean
from peak_mcp.runner import problem_wire as wire

PROBE = r'''
import json, os, socket, signal
out = {"pid": os.getpid(), "procs": sorted(p for p in os.listdir("/proc") if p.isdigit())}
try:
    open("/proc/sys/kernel/core_pattern", "w").close(); out["core_pattern"] = "writable"
except OSError as exc:
    out["core_pattern"] = exc.errno
try:
    os.kill(int(os.environ["PARENT"]), 0); out["signal"] = "sent"
except OSError as exc:
    out["signal"] = exc.errno
forked = []
for _ in range(40):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        import time; time.sleep(5); os._exit(0)
    forked.append(pid)
out["forks"] = len(forked)
try:
    socket.create_connection(("127.0.0.1", int(os.environ["PORT"])), timeout=2); out["tcp"] = "connected"
except OSError as exc:
    out["tcp"] = exc.errno or str(exc)
out["caps"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
out["env"] = sorted(os.environ)
print(json.dumps(out))
'''


def _isolated_run(tmp_path, max_processes: int = 16) -> dict:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    try:
        policy = Policy(read=(*SYSTEM_READ, *python_runtime_paths()), write=("/proc", str(tmp_path)), isolate=True,
                        max_processes=max_processes)
        env = child_environment({"PARENT": str(os.getpid()), "PORT": str(listener.getsockname()[1])},
                                environ={**os.environ, "PEAK_MCP_TOKEN": "canary-token-0123456789", "AWS_SECRET": "x"})
        done = subprocess.run(confined_command(policy, [sys.executable, "-I", "-c", PROBE]), capture_output=True,
                              text=True, timeout=60, env=env)
    finally:
        listener.close()
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(os.geteuid() != 0, reason="the root escapes are root's: CI runs as root")
@pytest.mark.skipif(landlock_abi().landlock_abi < 6, reason="needs Landlock ABI 6 (signal scoping)")
def test_a_confined_root_child_cannot_escape_signal_fork_or_connect(tmp_path) -> None:
    seen = _isolated_run(tmp_path)
    assert seen["pid"] == 1 and seen["procs"] == ["1"] + [str(p) for p in range(2, 2 + len(seen["procs"]) - 1)]
    assert seen["core_pattern"] == 30  # EROFS: /proc/sys is read-only in its mount namespace, though /proc is granted
    assert seen["signal"] in (1, 3)  # EPERM (Landlock's scope) or ESRCH (not in its PID namespace)
    assert seen["forks"] < 16  # the pids cgroup, which applies to root where RLIMIT_NPROC does not
    assert seen["tcp"] != "connected"
    assert int(seen["caps"], 16) == 0


def test_children_get_no_secret_from_the_environment(tmp_path) -> None:
    env = child_environment(environ={"PATH": "/usr/bin", "PEAK_MCP_TOKEN": "t", "AWS_SECRET_ACCESS_KEY": "k",
                                     "GITHUB_TOKEN": "g", "SSH_AUTH_SOCK": "/s", "HOME": "/root", "CUDA_HOME": "/c",
                                     "VK_DRIVER_FILES": "/v", "LC_ALL": "C", "PEAK_MCP_CHILD_ENV": "EXTRA,MY_TOKEN",
                                     "EXTRA": "e", "MY_TOKEN": "m"})
    assert env == {"PATH": "/usr/bin", "CUDA_HOME": "/c", "VK_DRIVER_FILES": "/v", "LC_ALL": "C", "EXTRA": "e"}


def test_doctor_probe_names_what_holds() -> None:
    found = probe_protections()
    assert found["landlock"] or found["missing"]
    if os.geteuid() == 0 and landlock_abi().active:
        assert "capabilities dropped" in found["held"]


def _pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)


def test_wire_round_trip_and_structure() -> None:
    a, b = _pair()
    with a, b:
        arrays: list[np.ndarray] = []
        value = {"y": np.arange(6.0).reshape(2, 3), "n": 3, "t": (np.float16(1.5), "s")}
        wire.send(a, {"result": wire.encode(value, arrays)}, arrays)
        header, got = wire.receive(b, 1 << 20)
        back = wire.decode(header["result"], got)
        assert np.array_equal(back["y"], value["y"]) and back["n"] == 3 and back["t"][1] == "s"
        assert float(back["t"][0]) == 1.5


def test_a_large_answer_reports_its_bytes_arriving(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 12 GiB answer took longer to cross than the pool's inactivity limit, which then blamed the problem file:
    the reader reports bytes as they arrive (every PROGRESS_BYTES), so a transfer that moves is never a stall."""
    monkeypatch.setattr(wire, "PROGRESS_BYTES", 4096)
    a, b = _pair()
    heard: list[tuple[int, int]] = []
    with a, b:
        arrays = [np.ones(3000, np.float64), np.zeros(1000, np.float32)]  # 28,000 bytes
        sender = threading.Thread(target=wire.send, args=(a, {"result": 1}, arrays))
        sender.start()
        header, got = wire.receive(b, 1 << 20, lambda done, total: heard.append((done, total)))
        sender.join()
    assert header["result"] == 1 and np.array_equal(got[0], arrays[0])
    assert heard and all(total == 28_000 for _, total in heard)
    done = [d for d, _ in heard]
    assert done == sorted(done) and done[-1] > 28_000 - 4096  # the reports reach the end of the frame
    assert all(b - a >= 4096 for a, b in itertools.pairwise(done))  # at most one per PROGRESS_BYTES


@pytest.mark.parametrize("header, why", [
    ({"arrays": [{"dtype": "|O", "shape": [1]}]}, "not data"),
    ({"arrays": [{"dtype": "<f8", "shape": [1 << 30, 1 << 10]}]}, "more than"),
    ({"arrays": [{"dtype": "<f8", "shape": [-1]}]}, "malformed shape"),
    ({"arrays": "x"}, "without its list"),
])
def test_wire_refuses_what_a_lying_host_sends(header, why) -> None:
    a, b = _pair()
    with a, b:
        text = json.dumps(header).encode()
        a.sendall(struct.pack(">Q", len(text)) + text)
        with pytest.raises(wire.WireError, match=why):
            wire.receive(b, 1 << 20)


def test_wire_refuses_a_huge_header() -> None:
    a, b = _pair()
    with a, b:
        a.sendall(struct.pack(">Q", 1 << 40))
        with pytest.raises(wire.WireError, match="header"):
            wire.receive(b, 1 << 20)


def test_foreign_values_keep_only_a_safe_type_name() -> None:
    assert type(wire.decode({"t": "list"}, [])).__name__ == "list"
    assert type(wire.decode({"t": "\x1b[2Jpwn"}, [])).__name__ == "object"


def test_clean_strips_terminal_control_and_bounds_length() -> None:
    assert clean("a\x1b[2J\x1b]0;pwn\x07b\x00c\n\td", 100) == "abc\n\td"
    long = clean("x" * 10_000_000, 50)
    assert long.startswith("x" * 50) and "cut" in long and len(long) < 100


COUNTED = r'''
import sys
sys.path.insert(0, {root!r})
from peak_mcp.confine import isolation, sandbox
isolation.join_cgroups = lambda *args, **kwargs: None  # a machine whose cgroups cannot be written (the lent GPU's)
policy = sandbox.Policy(read=(*sandbox.SYSTEM_READ, *sandbox.python_runtime_paths()), isolate=True, max_processes=30)
sys.argv = ["launcher", policy.to_json(), "1", "1", "--", sys.executable, "-I", "-c", {bomb!r}]
sandbox.main()
'''
BOMB = r'''
import os, time
for _ in range(300):
    if os.fork() == 0:
        time.sleep(30)
        os._exit(0)
print("all forked", flush=True)
time.sleep(30)  # the count is checked every 0.1 s: a tree that stays over the limit is stopped, a burst may finish
'''


@pytest.mark.skipif(os.geteuid() != 0, reason="the launcher counts tasks where root has no pids cgroup")
def test_without_a_pids_cgroup_the_launcher_stops_a_fork_bomb() -> None:
    root = str(__import__("pathlib").Path(__file__).resolve().parent.parent)
    done = subprocess.run([sys.executable, "-c", COUNTED.format(root=root, bomb=BOMB)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == -9, (done.stdout, done.stderr[-1000:])
    assert "more than 30 tasks" in done.stderr  # and the children, sleeping 30 s, are gone with their namespace


UNIX_CONNECT = r'''
import socket, sys
try:
    client = socket.socket(socket.AF_UNIX)
    client.connect(sys.argv[1])
    print("CONNECTED")
except OSError as exc:
    print("refused", exc.errno)
'''


def test_problem_code_cannot_reach_a_unix_socket_by_its_path(tmp_path) -> None:
    """Landlock (to ABI 7) does not mediate connect() to a pathname unix socket, and a network namespace does not hide
    one (a system bus or a container daemon's socket would hear a peer of uid 0): the launcher's seccomp filter
    refuses socket(2) itself to describe and problem hosts."""
    path = str(tmp_path / "daemon.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen()
    try:
        policy = Policy(read=(*SYSTEM_READ, *python_runtime_paths(), str(tmp_path)), isolate=True, max_processes=16,
                        no_sockets=True)
        done = subprocess.run(confined_command(policy, [sys.executable, "-I", "-c", UNIX_CONNECT, path]),
                              capture_output=True, text=True, timeout=60, env=child_environment())
    finally:
        listener.close()
    assert done.returncode == 0, done.stderr[-1000:]
    assert done.stdout.strip() == "refused 13"


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.isdir("/run"), reason="hides /run in a mount namespace as root")
def test_a_gpu_host_may_make_unix_sockets_but_finds_no_daemon_in_run(tmp_path) -> None:
    """A problem host on a GPU keeps socket(AF_UNIX) (cuInit fails without one: CUDA error 304, measured on the H200);
    /run, where the machine's daemons listen, is an empty tmpfs in its mount namespace instead."""
    folder = Path("/run") / f"peak-test-{os.getpid()}"
    folder.mkdir()
    path = str(folder / "daemon.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen()
    try:
        policy = Policy(read=(*SYSTEM_READ, *python_runtime_paths(), "/run"), isolate=True, max_processes=16,
                        no_sockets=True, unix_sockets=True)
        done = subprocess.run(confined_command(policy, [sys.executable, "-I", "-c", UNIX_CONNECT, path]),
                              capture_output=True, text=True, timeout=60, env=child_environment())
    finally:
        listener.close()
        os.unlink(path)
        folder.rmdir()
    assert done.returncode == 0, done.stderr[-1000:]
    assert done.stdout.strip() == "refused 2"  # ENOENT: the socket is not there to connect to
