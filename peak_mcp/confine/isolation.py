"""Namespaces, capabilities and cgroups for a child that runs untrusted text: what Landlock alone does not stop.

Landlock decides which files a process may open, but a root process that may write /proc (cuInit needs it) could
still write /proc/sys/kernel/core_pattern, read the server's /proc/<pid>/environ, signal the server, fork without
limit and open sockets. `isolate` runs in the sandbox launcher before the command is executed:

- new PID, mount, network and IPC namespaces (with a user namespace when not root): the child sees a fresh /proc
  holding only its own processes, has no network interface but a down loopback, and its whole process tree dies
  with its first process, however it daemonizes (the launcher's supervisor kills that one when asked to, or when
  the launcher's parent is gone);
- /proc/sys, /proc/sysrq-trigger, /proc/irq, /proc/bus and /proc/fs read-only, a private tmpfs on /dev/shm;
- a pids and a memory cgroup where the machine has them (root; RLIMIT_NPROC does not apply to uid 0);
- every capability dropped (bounding, ambient, effective, permitted, inheritable sets), so none of the above can be
  undone.

Each step that the machine refuses is skipped and named in the result, so `doctor` can say what holds. Only the
standard library is imported here.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 1, 24, 47, 4
_CAPABILITY_VERSION_3 = 0x20080522
READ_ONLY_PROC = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs", "/proc/pressure",
                  "/proc/acpi", "/proc/scsi", "/proc/mtrr", "/proc/sysvipc")
CGROUP_ROOT = "/sys/fs/cgroup"


@dataclass
class Isolation:
    """What `isolate` achieved: each protection that holds, and why each other one does not."""

    held: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)  # folders to remove once the child is gone

    def note(self, what: str, error: BaseException | str | None = None) -> None:
        if error is None:
            self.held.append(what)
        else:
            why = os.strerror(error.errno) if isinstance(error, OSError) and error.errno else str(error)
            self.missing.append(f"{what}: {why}")


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _unshare(flags: int) -> None:
    _check(_libc().unshare(ctypes.c_int(flags)), "unshare")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(_libc().mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _read(path: str) -> str:
    with open(path) as handle:
        return handle.read()


def enter_namespaces(result: Isolation) -> bool:
    """New PID, mount, network and IPC namespaces (inside a user namespace mapping this uid to itself when not
    root). True when the PID namespace holds: the caller must then fork, and its child is the namespace's init."""
    uid, gid = os.geteuid(), os.getegid()
    base = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC
    try:
        _unshare(base if uid == 0 else base | CLONE_NEWUSER)
    except OSError as exc:
        result.note("namespaces (pid, mount, network)", exc)
        return False
    if uid != 0:
        try:  # the same ids inside, so files keep their owners; no groups can be added
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
        except OSError as exc:
            result.note("user namespace id maps", exc)
    result.note("pid, mount and network namespaces")
    return True


def prepare_init(result: Isolation, hide: tuple[str, ...] = ()) -> None:
    """In the namespace's first process, before the command runs: a fresh /proc, the read-only kernel knobs, a
    private /dev/shm, an empty tmpfs over each folder of `hide`, then no capabilities."""
    try:
        _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here propagates back to the host
    except OSError as exc:
        result.note("private mounts", exc)
        drop_capabilities(result)
        return
    try:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        result.note("a /proc of the child's own processes")
    except OSError as exc:
        result.note("a /proc of the child's own processes", exc)
    failed = False
    for path in READ_ONLY_PROC:
        if not os.path.exists(path):
            continue
        try:
            _mount(path, path, None, MS_BIND | MS_REC)
            _mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_REC)
        except OSError as exc:
            failed = True
            result.note(f"{path} read-only", exc)
    if not failed and os.path.exists("/proc/sys"):  # every one held, /proc/sys first of all (kernel_knobs_safe)
        result.note("/proc/sys and the other kernel knobs read-only")
    try:
        _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=256m,mode=1777")
        result.note("a private /dev/shm")
    except OSError as exc:
        result.note("a private /dev/shm", exc)
    for folder in hide:  # where the machine's daemons keep their unix sockets
        if os.path.isdir(folder) and not os.path.islink(folder):
            try:
                _mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=1m,mode=755")
                result.note(f"{folder} hidden")
            except OSError as exc:
                result.note(f"{folder} hidden", exc)
    drop_capabilities(result)


def _own_cgroup(controller: str) -> tuple[str, str] | None:
    """(mount point, this process's path in it) for a cgroup v1 controller, or for v2 (controller "")."""
    try:
        lines = _read("/proc/self/cgroup").splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller and controller in controllers.split(","):
            mount = os.path.join(CGROUP_ROOT, controller)
            return (mount, path) if os.path.isdir(mount) else None
        if not controller and controllers == "":
            for mount in (CGROUP_ROOT, os.path.join(CGROUP_ROOT, "unified")):
                if os.path.exists(os.path.join(mount, "cgroup.controllers")):
                    return mount, path
    return None


def join_cgroups(result: Isolation, pid: int, memory_bytes: int | None, max_processes: int | None) -> None:
    """Put `pid` (the namespace's init, from the launcher) into a cgroup of its own under the launcher's, per
    limit: v2 where its controllers are enabled, else the v1 hierarchies. Only root may create them; elsewhere the
    rlimits are the floor. The folders are in `result.cgroups`, for the launcher to remove."""
    if os.geteuid() != 0 or (memory_bytes is None and max_processes is None):
        return
    name = f"peak-mcp-{os.getpid()}"
    unified = _own_cgroup("")
    for controller, limit, v1_file, v2_file in (("pids", max_processes, "pids.max", "pids.max"),
                                                ("memory", memory_bytes, "memory.limit_in_bytes", "memory.max")):
        if limit is None:
            continue
        placed = None
        for mount, knob, v2 in ((unified, v2_file, True), (_own_cgroup(controller), v1_file, False)):
            if mount is None:
                continue
            parent = os.path.join(mount[0], mount[1].lstrip("/"))
            if v2 and controller not in _enabled(parent):
                continue
            folder = os.path.join(parent, name)
            try:
                os.makedirs(folder, exist_ok=True)
                _write(os.path.join(folder, knob), str(limit))
                _write(os.path.join(folder, "cgroup.procs"), str(pid))
                placed = folder
                break
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.rmdir(folder)
                result.note(f"{controller} cgroup", exc)
        if placed:
            result.cgroups.append(placed)
            result.note(f"{controller} cgroup (limit {limit})")
        elif not any(m.startswith(f"{controller} cgroup") for m in result.missing):
            result.note(f"{controller} cgroup", "no cgroup hierarchy with that controller can be written here")


def _enabled(folder: str) -> set[str]:
    try:
        return set(_read(os.path.join(folder, "cgroup.subtree_control")).split())
    except OSError:
        return set()


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities(result: Isolation) -> None:
    """No capability left in any set, nor in the bounding set that an exec could draw on."""
    libc = _libc()
    try:
        last = int(_read("/proc/sys/kernel/cap_last_cap"))
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EPERM:
            break  # no CAP_SETPCAP: not privileged, nothing to drop from the bounding set
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header, data = _CapHeader(_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        result.note("capabilities dropped", OSError(ctypes.get_errno(), "capset"))
    else:
        result.note("capabilities dropped")


def supervise(child: int, cgroups: list[str] | None = None, max_tasks: int | None = None,
              namespace: str | None = None) -> None:
    """The launcher's part once the namespace's init runs: wait for it and exit with its status; kill it (and so
    the whole namespace) when this launcher is told to stop, its own parent is gone, or, where no pids cgroup holds
    the namespace (`max_tasks` set), it has more tasks than that (counted in `namespace`, as pid_namespace read it
    before the init was let go). Never returns."""
    parent = os.getppid()
    for fd in (0, 1):  # the child holds the pipes; the server must see them close when the child is gone
        with contextlib.suppress(OSError):
            os.close(fd)

    def stop(_signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):
            os.kill(child, signal.SIGKILL)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stop)
    if max_tasks and namespace is None:
        print(f"peak-mcp sandbox: the process limit {max_tasks} cannot be counted (no PID namespace name)",
              file=sys.stderr, flush=True)
    status = 0
    while True:
        try:
            pid, status = os.waitpid(child, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == child:
            break
        if os.getppid() != parent:  # the server is gone (kill -9 included)
            stop(0, None)
        elif namespace and max_tasks and _tasks_in(namespace) > max_tasks:
            print(f"peak-mcp sandbox: more than {max_tasks} tasks: the process tree was stopped", file=sys.stderr,
                  flush=True)
            stop(0, None)
        time.sleep(0.1 if namespace else 0.2)
    for folder in cgroups or ():
        for _ in range(20):  # the namespace's processes leave the cgroup as the kernel reaps them
            try:
                os.rmdir(folder)
                break
            except OSError:
                time.sleep(0.05)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # died of a signal: die of it too, so that Popen reads it as it would from a direct child
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


def pid_namespace(pid: int) -> str | None:
    """The PID namespace `pid` is in, as /proc names it. The launcher reads it before it lets the namespace's init
    go: the init then mounts its own /proc in the mount namespace they share, where the launcher's pid number for
    it may name nothing. (A CI run on a loaded machine once let a fork bomb run past the count; not reproduced.)"""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def pids_in(namespace: str) -> list[int]:
    """The processes in PID namespace `namespace` (as /proc/<pid>/ns/pid names it), seen from outside it."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry.name}/ns/pid") == namespace:
                    found.append(int(entry.name))
    return found


def _tasks_in(namespace: str) -> int:
    """Tasks (threads count, as a pids cgroup counts them) of the processes in PID namespace `namespace`."""
    tasks = 0
    for pid in pids_in(namespace):
        with contextlib.suppress(OSError):
            tasks += len(os.listdir(f"/proc/{pid}/task"))
    return tasks


def init_watch(ready: int, result: Isolation) -> None:
    """In the namespace's init: die with the launcher (it is single-threaded, so PDEATHSIG fires on its death,
    not on some thread's), then wait for its word on `ready`: what it did with the cgroups. The parent is outside
    the namespace (getppid() is 0 here), so a launcher already gone shows as a word never said."""
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    word = b""
    while chunk := os.read(ready, 65536):
        word += chunk
    os.close(ready)
    if not word:
        os._exit(1)
    told = json.loads(word)
    result.held += told["held"]
    result.missing += told["missing"]


def tell_init(ready: int, result: Isolation) -> None:
    """The launcher's word to the namespace's init (see init_watch)."""
    os.write(ready, json.dumps({"held": result.held, "missing": result.missing}).encode())


# seccomp: no new socket in a process that needs none (describe, a problem host: its one socket is inherited).
# Landlock (to ABI 7) does not mediate connecting to a unix socket by path, and a network namespace does not hide
# one: /run/systemd/private, a Docker or D-Bus socket would hear a peer of uid 0.
_SECCOMP_MODE_FILTER, _PR_SET_SECCOMP = 2, 22  # prctl's mode (1 would be strict mode)
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_RET_K = 0x20, 0x15, 0x06
# (audit arch, socket(2)'s number, the x32 variant where there is one)
_ARCHES = {"x86_64": (0xC000003E, 41, 0x40000000 | 41), "aarch64": (0xC00000B7, 198, None)}


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_Filter))]


def forbid_sockets(result: Isolation, allow_unix: bool = False) -> None:
    """socket(2) fails with EACCES for this process and its children, whatever the family (but AF_UNIX where
    `allow_unix`: the CUDA driver's initialization needs one, measured on the H200); a system call of another
    architecture (a 32-bit entry point) fails with EPERM. Needs no_new_privs (set by the caller) or CAP_SYS_ADMIN."""
    what = "no new sockets but unix ones (seccomp)" if allow_unix else "no new sockets (seccomp)"
    arch = _ARCHES.get(os.uname().machine)
    if arch is None:
        result.note(what, f"no filter written for {os.uname().machine}")
        return
    audit, number, x32 = arch
    deny_socket = _RET_ERRNO | errno.EACCES
    family = 1 if allow_unix else 0xFFFFFFFF  # AF_UNIX, or a family no call names
    rules = [(_BPF_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
             (_BPF_JEQ_K, 1, 0, audit),
             (_BPF_RET_K, 0, 0, _RET_ERRNO | errno.EPERM),
             (_BPF_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
             (_BPF_JEQ_K, 2, 0, number),
             (_BPF_JEQ_K, 1, 0, x32 if x32 is not None else number),
             (_BPF_RET_K, 0, 0, _RET_ALLOW),
             (_BPF_LD_W_ABS, 0, 0, 16),  # seccomp_data.args[0], its low word: the family
             (_BPF_JEQ_K, 1, 0, family),
             (_BPF_RET_K, 0, 0, deny_socket),
             (_BPF_RET_K, 0, 0, _RET_ALLOW)]
    program = (_Filter * len(rules))(*(_Filter(*rule) for rule in rules))
    prog = _Program(len(rules), program)
    libc = _libc()
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        result.note(what, OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)"))
    else:
        result.note(what)
