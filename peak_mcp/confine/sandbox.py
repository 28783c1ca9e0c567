"""The wall behind the include check: processes that read untrusted text see only the trees they need.

`backends/includes.py` refuses every directive that could name a host file before a compiler runs. This module is
the defence in depth behind it, for the day a text check is bypassed: compilers and device workers run confined by
Landlock (Linux 5.13+, no privileges needed, inherited by children, never lifted), so they can read the toolchain,
the Python runtime and their own working directory, and write only the latter: a home directory, an SSH key or the
server's data dir is not there to read. Limits on address space and CPU time bound what one compile may take from
the host (a 1 KB macro bomb otherwise grows a compiler to 12 GB).

Landlock does not hide whether a path exists (stat is not mediated): the text check alone answers `__has_include`.
It also keeps a confined process from reading an unconfined one's /proc entries (environ, mem), so /proc is granted.

Only the standard library is imported here: `python -m peak_mcp.confine.sandbox` confines itself and then execs a
compiler.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import platform
import resource
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

# Landlock's syscalls are in the generic table (the same numbers on x86-64 and arm64).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_MAKE_AND_REMOVE = sum(1 << bit for bit in range(4, 13))  # remove dir/file, make char/dir/reg/sock/fifo/block/sym
_REFER, _TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
_FILE_ONLY = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE  # the rights a rule on a non-directory may carry
READ = _EXECUTE | _READ_FILE | _READ_DIR
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4: handled with no rule, every TCP bind and connect fails
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6: nothing outside the domain is reached

# What any confined process may read of the host: the system's programs and libraries, the loader's cache, GPU
# driver and Vulkan ICD descriptions, /proc and /sys (device discovery), and harmless device files. Not /etc as a
# whole, /home, /root, /srv, /mnt, /var or /tmp.
SYSTEM_READ = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/opt", "/proc", "/sys",
               "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/vulkan",
               "/etc/glvnd", "/etc/nvidia", "/etc/OpenCL", "/etc/localtime", "/dev/null", "/dev/zero", "/dev/full",
               "/dev/random", "/dev/urandom")
# Device nodes a GPU worker opens read-write (NVIDIA, AMD, DRM render nodes). Not /dev/shm: shared with every other
# process of the machine unless the launcher mounted a private one, and nothing a worker runs needs it.
DEVICE_WRITE = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset", "/dev/kfd",
                "/dev/dri", "/dev/null")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@dataclass(frozen=True)
class Policy:
    """What a confined process may reach. Paths that do not exist are skipped."""

    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()  # read, write, create and remove beneath
    memory_bytes: int | None = None  # RLIMIT_AS
    cpu_seconds: int | None = None  # RLIMIT_CPU (SIGXCPU, then SIGKILL one second later)
    # The launcher's namespaces, read-only kernel knobs, cgroups and capability drop (peak_mcp.confine.isolation): for a
    # process that runs agent or problem text and is started from the server (a worker, a problem host,
    # describe). A child of such a process is inside them already.
    isolate: bool = False
    max_processes: int | None = None  # a pids cgroup under root, where the launcher isolates
    cgroup_memory_bytes: int | None = None  # a memory cgroup: the limit for processes RLIMIT_AS would break (CUDA)
    # Where no memory cgroup can be made (not root, or no writable hierarchy): cgroup_memory_bytes as RLIMIT_AS
    # instead, for a process that uses no GPU (a GPU context reserves far more address space than it uses).
    address_space_fallback: bool = False
    no_sockets: bool = False  # seccomp: socket(2) refused (a process whose only socket is inherited, or none)
    # ... but AF_UNIX ones (cuInit makes one), with the folders where daemons keep their sockets (/run) hidden
    unix_sockets: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Policy:
        data = json.loads(text)
        return cls(**{**data, "read": tuple(data["read"]), "write": tuple(data["write"])})


@dataclass(frozen=True)
class Protection:
    """What confinement this machine gives: Landlock's ABI version, or why there is none."""

    landlock_abi: int
    reason: str = ""
    skipped: list[str] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return self.landlock_abi > 0

    def describe(self) -> str:
        if self.active:
            return f"Landlock ABI {self.landlock_abi}: compilers and workers read only the toolchain and runtime trees"
        return f"none ({self.reason}): only the include check keeps host files out of compiles"


def _syscall() -> ctypes._CFuncPtr | None:
    if platform.system() != "Linux":
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    call = libc.syscall
    call.restype = ctypes.c_long
    return call


def landlock_abi() -> Protection:
    """The Landlock ABI this kernel offers (0 with the reason when none)."""
    call = _syscall()
    if call is None:
        return Protection(0, f"Landlock is Linux-only ({platform.system()})")
    abi = call(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    if abi < 0:
        errno = ctypes.get_errno()
        why = "the kernel has no Landlock or it is disabled at boot" if errno in (38, 95) else os.strerror(errno)
        return Protection(0, why)
    return Protection(int(abi))


def python_runtime_paths() -> list[str]:
    """What a Python child needs to import this package and its dependencies: the interpreter's prefixes, every
    import path entry, and the folder this package was imported from (a checkout run from its own directory is
    on sys.path only as '', which grants nothing)."""
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return _grantable([sys.prefix, sys.base_prefix, sys.exec_prefix,
                       os.path.dirname(os.path.realpath(sys.executable)), package_parent, *sys.path])


def tool_paths(environ: dict[str, str] | None = None) -> list[str]:
    """Where this environment says programs, libraries and Vulkan drivers live, beyond the system trees: the tree
    around each PATH and LD_LIBRARY_PATH entry (`/opt/x` for `/opt/x/bin`) and the folders of the Vulkan driver
    and layer manifests. A compiler unpacked under /tmp and put on PATH must stay runnable when confined."""
    environ = os.environ if environ is None else environ
    found: list[str] = []
    for variable in ("PATH", "LD_LIBRARY_PATH"):
        for entry in environ.get(variable, "").split(os.pathsep):
            if os.path.isabs(entry):
                real = os.path.realpath(entry).rstrip("/")
                parent, leaf = os.path.split(real)
                wide = (leaf in ("bin", "sbin") or leaf.startswith("lib")) and not _in_a_home(real)
                found.append(parent if wide else real)  # ~/.local/bin, not ~/.local with the data dir in it
    for variable in ("VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES"):
        found += [os.path.dirname(f) for f in environ.get(variable, "").split(os.pathsep) if os.path.isabs(f)]
    for variable in ("VK_LAYER_PATH", "VK_ADD_LAYER_PATH"):  # the validation layer's manifests
        found += [d for d in environ.get(variable, "").split(os.pathsep) if os.path.isabs(d)]
    return _grantable(found)


def _homes() -> set[str]:
    return {os.path.realpath(os.path.expanduser("~")), "/root", "/home"}


def _in_a_home(path: str) -> bool:
    return any(path.startswith(home + "/") for home in _homes())


def _grantable(entries: Iterable[str]) -> list[str]:
    """Existing real paths, less the root and any home directory or ancestor of one (it would grant all of it)."""
    kept: list[str] = []
    for entry in entries:
        if not entry or not os.path.exists(entry):
            continue
        real = os.path.realpath(entry)
        if real == "/" or any(home == real or home.startswith(real.rstrip("/") + "/") for home in _homes()):
            continue
        kept.append(real)
    return list(dict.fromkeys(kept))


def worker_policy(workdir: str, cache_dirs: Iterable[str] = (), read: Iterable[str] = (),
                  proc_write: bool = True) -> Policy:
    """A device worker's reach: the system and Python trees and `read` read-only; its private working directory,
    the caches it keeps (cupy's kernel cache) and the GPU device nodes writable. No memory limit: a GPU context
    reserves far more address space than it uses, and a compile, the one thing agent text can blow up, has its own
    limits.

    /proc writable where `proc_write`: cuInit writes under /proc/self (measured on the H100:
    CUDA_ERROR_OPERATING_SYSTEM without it), and so do the CUDA processes a worker starts (compute-sanitizer's
    target), each under its own pid. That is safe only where /proc/sys cannot be written through it: the launcher's
    mount namespace made it read-only, or the worker is not root (kernel_knobs_safe)."""
    return Policy(read=(*SYSTEM_READ, *python_runtime_paths(), *tool_paths(), *_grantable(read)),
                  write=(workdir, *(("/proc",) if proc_write else ()), *cache_dirs, *gpu_device_nodes()))


def gpu_device_nodes() -> tuple[str, ...]:
    """The device nodes a GPU process opens read-write: DEVICE_WRITE and every /dev/nvidiaN."""
    return (*DEVICE_WRITE, *(os.path.join("/dev", name) for name in _listdir("/dev") if name.startswith("nvidia")))


def kernel_knobs_safe() -> bool:
    """Whether this process cannot write /proc/sys even where Landlock lets it: it is not root, or the launcher
    made /proc/sys read-only in its mount namespace."""
    if os.geteuid() != 0:
        return True
    try:
        held = json.loads(os.environ.get(ISOLATION_VARIABLE, "{}")).get("held", [])
    except (json.JSONDecodeError, AttributeError):
        return False
    return any(item.startswith("/proc/sys") for item in held)


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _limit(kind: int, value: int | None) -> None:
    """Lower the soft limit to `value`; for CPU time the hard limit follows a second later (SIGKILL after the
    SIGXCPU that a process could catch)."""
    if value is None:
        return
    _, hard = resource.getrlimit(kind)
    soft = value if hard == resource.RLIM_INFINITY else min(value, hard)
    if kind == resource.RLIMIT_CPU and (hard == resource.RLIM_INFINITY or hard > soft + 1):
        hard = soft + 1
    resource.setrlimit(kind, (soft, hard))


def _add_rules(call: ctypes._CFuncPtr, ruleset: int, paths: Iterable[str], access: int, handled: int,
               skipped: list[str]) -> None:
    for path in paths:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue  # absent here: nothing to grant
        try:
            allowed = access & handled
            if not os.path.isdir(path):
                allowed &= _FILE_ONLY
            rule = _PathBeneathAttr(allowed, fd)
            if call(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                    ctypes.c_uint32(0)) < 0:
                skipped.append(f"{path}: {os.strerror(ctypes.get_errno())}")
        finally:
            os.close(fd)


def confine(policy: Policy, landlock: bool = True) -> Protection:
    """Apply `policy` to this process and its future children: rlimits always, Landlock where the kernel has it and
    `landlock` asks for it. Irreversible. Returns what was applied."""
    # /etc/passwd stays unreadable (a compiler diagnostic must not quote it), so a user lookup has to be answered
    # from the environment: getpass.getuser() reads these first. torch.compile and torch's own set-up ask for the
    # user name; without it both raised KeyError('getpwuid(): uid not found: 0') in a confined worker on the H100.
    if not any(os.environ.get(name) for name in ("LOGNAME", "USER", "LNAME", "USERNAME")):
        os.environ["USER"] = f"uid{os.getuid()}"
    _limit(resource.RLIMIT_AS, policy.memory_bytes)
    _limit(resource.RLIMIT_CPU, policy.cpu_seconds)
    if not landlock:
        return Protection(0, "switched off (PEAK_MCP_SANDBOX=0)")
    found = landlock_abi()
    call = _syscall()
    if not found.active or call is None:
        return found
    handled = READ | _WRITE_FILE | _MAKE_AND_REMOVE
    if found.landlock_abi >= 2:
        handled |= _REFER
    if found.landlock_abi >= 3:
        handled |= _TRUNCATE
    # No TCP (ABI 4), and no signal or abstract unix socket beyond this domain (ABI 6): a confined process cannot
    # kill the server, or talk to its HTTP port or to another client's process.
    attr = _RulesetAttr(handled, _NET_BIND_TCP | _NET_CONNECT_TCP if found.landlock_abi >= 4 else 0,
                        _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if found.landlock_abi >= 6 else 0)
    size = 24 if found.landlock_abi >= 6 else 16 if found.landlock_abi >= 4 else 8
    ruleset = call(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return Protection(0, f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    skipped: list[str] = []
    try:
        _add_rules(call, ruleset, policy.read, READ, handled, skipped)
        _add_rules(call, ruleset, policy.write, handled, handled, skipped)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return Protection(0, f"prctl(NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}")
        if call(_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            return Protection(0, f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)
    return Protection(found.landlock_abi, skipped=skipped)


def reaches(protection: Protection) -> list[str]:
    """What a Landlock domain of this ABI denies beyond files, in words."""
    denied = []
    if protection.landlock_abi >= 4:
        denied.append("no TCP connect or bind")
    if protection.landlock_abi >= 6:
        denied.append("no signal or abstract unix socket beyond its own processes")
    return denied


def confined_command(policy: Policy, command: list[str], enabled: bool = True, landlock: bool = True) -> list[str]:
    """`command` run under `policy`: a short stdlib-only Python (`-I -S`) isolates itself where the policy asks
    (peak_mcp.confine.isolation), confines itself and execs it. With `enabled=False` only the rlimits apply (the same
    launcher, no namespaces, Landlock off), so limits never depend on it; `landlock=False` leaves Landlock to the
    command itself (a worker confines itself once it knows its paths). Killing the launcher's process group kills
    the command's whole tree: the launcher's supervisor takes the namespace down with it."""
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    bootstrap = f"import sys; sys.path.insert(0, {package_parent!r}); from peak_mcp.confine.sandbox import main; main()"
    return [sys.executable, "-I", "-S", "-c", bootstrap, policy.to_json(), "1" if enabled else "0",
            "1" if enabled and landlock else "0", "--", *command]


ISOLATION_VARIABLE = "PEAK_MCP_ISOLATION"  # what the launcher achieved, for the command to report (doctor)
SOCKET_FOLDERS = ("/run", "/var/run")  # the system's daemons' unix sockets (systemd, D-Bus, Docker, ...)


def isolate(policy: Policy) -> dict[str, list[str]]:
    """The launcher's isolation (peak_mcp.confine.isolation). Where the PID namespace holds, this process forks: the
    parent supervises and never returns; the child, the namespace's init, goes on to confine and exec."""
    from peak_mcp.confine import isolation

    found = isolation.Isolation()
    if isolation.enter_namespaces(found):
        ready_read, ready_write = os.pipe()
        child = os.fork()
        if child:
            os.close(ready_read)
            namespace = isolation.pid_namespace(child)  # now: the init mounts its own /proc once let go
            limits = isolation.Isolation()
            try:
                isolation.join_cgroups(limits, child, policy.cgroup_memory_bytes, policy.max_processes)
                isolation.tell_init(ready_write, limits)  # the child is in its cgroups now
            finally:
                os.close(ready_write)
                counted = not any(c.startswith("pids") for c in limits.held)  # no pids cgroup: count
                isolation.supervise(child, limits.cgroups, policy.max_processes if counted else None, namespace)
        os.close(ready_write)
        isolation.init_watch(ready_read, found)
        isolation.prepare_init(found, SOCKET_FOLDERS if policy.no_sockets and policy.unix_sockets else ())
        if os.geteuid() != 0 and policy.max_processes:  # counted per user namespace: this one's processes only
            resource.setrlimit(resource.RLIMIT_NPROC, (policy.max_processes, policy.max_processes))
            found.note(f"process limit {policy.max_processes} (RLIMIT_NPROC in its user namespace)")
        elif policy.max_processes and not any(h.startswith("pids cgroup") for h in found.held):
            found.note(f"process limit {policy.max_processes} (counted by the launcher, which stops the tree)")
    else:
        isolation.drop_capabilities(found)
        if policy.max_processes:
            found.note("process limit", "none without a PID namespace (a process group is all that is killed)")
    return {"held": found.held, "missing": found.missing}


def probe_protections(enabled: bool = True, timeout_s: float = 30.0) -> dict[str, list[str]]:
    """What the launcher achieves on this machine, as a problem host or describe gets it: a confined child reports
    its own isolation (namespaces, read-only kernel knobs, cgroups, capabilities) and Landlock; for `doctor`."""
    import subprocess

    policy = Policy(read=(*SYSTEM_READ, *python_runtime_paths()), isolate=True, max_processes=16,
                    cgroup_memory_bytes=256 << 20, address_space_fallback=True, no_sockets=True)
    command = [sys.executable, "-I", "-S", "-c", f"import os; print(os.environ.get({ISOLATION_VARIABLE!r}, ''))"]
    try:
        done = subprocess.run(confined_command(policy, command, enabled), capture_output=True, text=True,
                              timeout=timeout_s, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                              stdin=subprocess.DEVNULL, check=False)
        report = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError, IndexError) as exc:
        return {"held": [], "missing": [f"the sandbox launcher did not run: {type(exc).__name__}: {exc}"],
                "landlock": []}
    return {"held": list(report.get("held", [])), "missing": list(report.get("missing", [])),
            "landlock": list(report.get("landlock", []))}


def main() -> None:
    """`confined_command`'s launcher: argv = policy JSON, sandbox on/off, Landlock here on/off, `--`, the command."""
    from peak_mcp.confine import isolation

    policy_json, enabled, landlock, separator, *command = sys.argv[1:]
    if separator != "--" or not command:
        sys.exit("usage: peak_mcp.confine.sandbox POLICY 0|1 0|1 -- COMMAND...")
    policy = Policy.from_json(policy_json)
    report = isolate(policy) if policy.isolate and enabled == "1" else {"held": [], "missing": ["not asked for"]}
    os.environ[ISOLATION_VARIABLE] = json.dumps(report)
    if policy.cgroup_memory_bytes and policy.memory_bytes is None and \
            not any(item.startswith("memory cgroup") for item in report["held"]):
        if policy.address_space_fallback:
            policy = dataclasses.replace(policy, memory_bytes=policy.cgroup_memory_bytes)
            report["held"].append(f"address space limit {policy.memory_bytes >> 20} MiB (no memory cgroup)")
        else:  # a GPU process: an address-space limit would break its context
            report["missing"].append("memory limit: none (no memory cgroup, and a GPU process takes no address-space "
                                     "limit)")
    if "/proc" in policy.write and not kernel_knobs_safe():  # root, and /proc/sys could be written through it
        policy = dataclasses.replace(policy, write=tuple(p for p in policy.write if p != "/proc"))
        report["missing"].append("/proc not writable: /proc/sys could not be made read-only (GPU use may fail)")
    if landlock == "1" or enabled != "1":  # the rlimits apply either way
        protection = confine(policy, landlock=landlock == "1")
        report["landlock"] = [protection.describe(), *reaches(protection)] if protection.active \
            else [protection.reason]
    if policy.no_sockets and enabled == "1":  # after Landlock, which set no_new_privs
        found = isolation.Isolation()
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        isolation.forbid_sockets(found, allow_unix=policy.unix_sockets)
        report["held"] += found.held
        report["missing"] += found.missing
    os.environ[ISOLATION_VARIABLE] = json.dumps(report)
    try:
        os.execv(command[0], command)
    except OSError as exc:
        sys.exit(f"cannot run {os.path.basename(command[0])}: {exc.strerror}")


if __name__ == "__main__":
    main()
