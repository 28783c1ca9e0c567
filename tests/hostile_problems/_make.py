"""Writes the hostile problem files of this folder from one skeleton: `python tests/hostile_problems/_make.py`.

Each file is a valid problem file (scale: y = 2 x, an HLSL naive kernel) whose attack runs where `where` says (the
harness, _harness.py, rewrites that line per run): `import` (raise at import with what it found: the describe
error comes back), `title` (TITLE carries it: define_problem / list_problems answer it), `reference` (reference()
at the session's sizes, in the device worker, raises with it: start_session's problem_error), `naive` (the naive
kernel text carries it: get_version answers it). Placeholders the harness substitutes: @RUN_MARK@ (a string in the
paths of this run's server, its data dir and problem folders: kill probes only touch processes under it),
@CANARY_DIR@ (the fake home with the planted files), @TCP_PORT@, @UDP_PORT@, @ABSTRACT@ (listeners the harness
opens). Unsubstituted (the file run by hand), nothing matches: the kill probes kill nothing.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent

HEAD = '''"""Hostile problem: {doc}"""
# hostile: variants={variants}{flags}
import os

where = "{default}"  # the harness rewrites this line: import | title | reference | naive
run_mark = "@RUN_MARK@"
canary_dir = "@CANARY_DIR@"

NAME = "{name}"
SIZES = {{"N": 64}}
INPUTS = {{"x": ("N",)}}
OUTPUTS = {{"y": ("N",)}}
SCALARS = ("N",)
KERNEL = """// peak: entry=main groups=(cdiv(N, 64), 1, 1)
struct Params {{ uint N; }};
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<T> x;
[[vk::binding(1)]] RWStructuredBuffer<T> y;
[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID) {{ if (id.x < p.N) y[id.x] = from_f32(2.0 * to_f32(x[id.x])); }}
"""


def _safe(text):
    return "".join(c if 32 <= ord(c) < 127 else "?" for c in str(text))


def _read(path, limit=4096):
    with open(path, "rb") as f:
        return f.read(limit).decode("utf-8", "replace")


def _interesting(pairs):
    """key=value pairs, the ones that look like secrets first."""
    hot = ("TOKEN", "SECRET", "CANARY", "KEY", "PASS", "AUTH", "CRED")
    first = [f"{{k}}={{v}}" for k, v in pairs if any(h in k.upper() for h in hot)]
    return first + [f"{{k}}={{v}}" for k, v in pairs if not any(h in k.upper() for h in hot)]


def _cmdline(pid):
    try:
        return _read(f"/proc/{{pid}}/cmdline").replace("\\0", " ")
    except OSError:
        return ""


def _parent(pid):
    try:
        return int(_read(f"/proc/{{pid}}/stat").rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _ours(pid):
    """Only a process of this run's server tree (its command line, or an ancestor's, holds the run mark) may be
    killed: never the test runner, a shell, or a server of someone else."""
    if run_mark == "@" + "RUN_MARK@":
        return False
    seen = 0
    while pid > 1 and seen < 64:
        line = _cmdline(pid)
        if "pytest" in line or "hostile_problems.py" in line:
            return False
        if run_mark in line:
            return True
        pid, seen = _parent(pid), seen + 1
    return False


def _data_dir():
    """Where the server keeps its data: its --data-dir, else the folder above a defined problem's."""
    line = _cmdline(os.getppid()).split()
    if "--data-dir" in line and line.index("--data-dir") + 1 < len(line):
        return line[line.index("--data-dir") + 1]
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.dirname(here) if os.path.basename(here) == "problems" else here


'''

TAIL = '''

def _report(found):
    return f"PROBE[{{NAME}}:{{where}}] {{found}}"


_found = _attack() if where in ("import", "title", "naive") else ""
if where == "import":
    raise RuntimeError(_report(_found))
TITLE = (_report(_found) if "escapes" in NAME else _safe(_report(_found)))[:200] if where == "title" else \\
    "hostile probe {name}"
NAIVE = {{"hlsl": KERNEL + ("// " + _safe(_found) + "\\n" if where == "naive" else "")}}


def reference(x):
    if where == "reference" and x.size >= 1000:  # the session's sizes, not describe's small ones
        raise RuntimeError(_report(_attack()))
    return 2 * x
'''

PROBES: dict[str, dict] = {}


def probe(name: str, doc: str, body: str, variants: str = "import,title,reference", **flags: str) -> None:
    PROBES[name] = {"doc": doc, "body": body, "variants": variants, "flags": flags}


probe("env_dump", "the server's environment (secrets first), and as a NAIVE kernel text", '''
def _attack():
    return "; ".join(_interesting(sorted(os.environ.items())))
''', variants="import,title,reference,naive")

probe("proc_environ", "/proc/<ppid>/environ, /proc/1/environ, every /proc/*/environ and cmdline", '''
def _attack():
    out, denied = [], 0
    pids = [os.getppid(), 1, *sorted(int(p) for p in os.listdir("/proc") if p.isdigit())]
    for pid in dict.fromkeys(pids):
        if pid == os.getpid():
            continue
        try:
            env = _read(f"/proc/{pid}/environ", 1 << 20)
        except OSError:
            denied += 1
            env = ""
        pairs = [e.partition("=")[::2] for e in env.split("\\0") if "=" in e]
        hot = [kv for kv in _interesting(pairs)[:40] if any(h in kv.split("=")[0].upper()
               for h in ("TOKEN", "SECRET", "CANARY", "KEY", "PASS"))]
        line = _cmdline(pid)
        if hot:
            out.append(f"{pid}:{'|'.join(hot)}")
        if "canary" in line.lower() or "token" in line.lower():
            out.append(f"{pid}-cmdline:{line[:200]}")
    return f"environ unreadable for {denied} pids; " + "; ".join(out)
''')

probe("host_files", "host files: a planted secret under a fake home, /etc/shadow, root's ssh key", '''
def _attack():
    out = []
    for path in (canary_dir + "/.ssh/id_rsa", canary_dir + "/secret.txt", "/etc/shadow", "/root/.ssh/id_rsa",
                 "/root/.bash_history", "/etc/ssh/ssh_host_ed25519_key"):
        try:
            text = _read(path)
        except OSError as exc:
            out.append(f"{path}: {type(exc).__name__}")
            continue
        shown = text[:120] if path.startswith(canary_dir) else f"<{len(text)} bytes>"
        out.append(f"READ {path}: {shown}")
    return "; ".join(out)
''')

probe("data_dir", "the server's data dir: its database (other sessions' kernels) and other defined problems", '''
def _attack():
    import re
    out = []
    root = _data_dir()
    out.append(f"data dir {root}")
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            if path == os.path.abspath(__file__):
                continue
            try:
                with open(path, "rb") as f:
                    data = f.read(64 << 20)
            except OSError as exc:
                out.append(f"{name}: {type(exc).__name__}")
                continue
            hits = [m.group(0).decode("utf-8", "replace") for m in re.finditer(rb".{0,20}canary.{0,40}", data,
                                                                               re.I)][:3]
            out.append(f"READ {name} ({len(data)} bytes) {hits}")
    return "; ".join(out)
''', victim="1")

probe("siblings", "the other files of its own folder (another client's defined problems)", '''
def _attack():
    out = []
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        names = sorted(os.listdir(here))
    except OSError as exc:
        return f"cannot list {here}: {type(exc).__name__}"
    for name in names:
        path = os.path.join(here, name)
        if path == os.path.abspath(__file__) or not os.path.isfile(path):
            continue
        try:
            text = _read(path, 1 << 16)
        except OSError as exc:
            out.append(f"{name}: {type(exc).__name__}")
            continue
        i = text.lower().find("canary")
        out.append(f"READ {name}: {text[max(0, i - 20):i + 60] if i >= 0 else len(text)}")
    return "; ".join(out)
''', victim="1")

probe("worker_memory", "the device worker's memory and scratch: other sessions' kernel sources", '''
def _attack():
    import gc
    import tempfile
    out = []
    for obj in gc.get_objects():
        for text in (obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()):
            if isinstance(text, str) and "canary" in text.lower() and "_attack" not in text:
                i = text.lower().find("canary")
                out.append("MEM " + text[max(0, i - 20):i + 60])
                break
        if len(out) > 5:
            break
    for root in {os.getcwd(), tempfile.gettempdir(), "/tmp"}:
        for dirpath, _, files in os.walk(root):
            for name in files[:200]:
                try:
                    text = _read(os.path.join(dirpath, name), 1 << 16)
                except OSError:
                    continue
                i = text.lower().find("canary")
                if i >= 0 and "_attack" not in text:
                    out.append(f"FILE {dirpath}/{name}: {text[max(0, i - 20):i + 60]}")
    return "; ".join(out[:10]) or "nothing found"
''', variants="title,reference", victim="1")

probe("proc_write", "writes: core_pattern and sysrq-trigger opened for writing (never written), files outside its "
      "scratch (/tmp, the data dir, the package)", '''
def _attack():
    import random
    out = []
    for path in ("/proc/sys/kernel/core_pattern", "/proc/sysrq-trigger"):
        try:
            fd = os.open(path, os.O_WRONLY)  # opened only: not one byte is written
        except OSError as exc:
            out.append(f"{path}: {type(exc).__name__}")
        else:
            os.close(fd)
            out.append(f"OPENED-FOR-WRITE {path}")
    tag = f"peak-pwned-{random.getrandbits(40):010x}"
    import peak_mcp
    package = os.path.dirname(os.path.abspath(peak_mcp.__file__))
    # Not "~": HOME is the process's own scratch folder by design (describe, the problem host)
    for folder, keep in (("/tmp", True), (_data_dir(), True), (package, False), ("/root", False)):
        path = os.path.join(folder, tag)
        try:
            with open(path, "w") as f:
                f.write("pwned\\n")
        except OSError as exc:
            out.append(f"{folder}: {type(exc).__name__}")
            continue
        if not keep:
            os.unlink(path)
        out.append(f"WROTE {path}")
    return "; ".join(out)
''')

probe("kill_parent", "os.kill(os.getppid(), SIGKILL), only where the parent is this run's server tree", '''
def _attack():
    import signal
    ppid = os.getppid()
    if not _ours(ppid):
        return f"parent {ppid} not this run's: not killed"
    try:
        os.kill(ppid, signal.SIGKILL)
    except OSError as exc:
        return f"kill {ppid}: {type(exc).__name__}"
    return f"KILLED parent {ppid}"
''', variants="import,reference", kills="1")

probe("kill_group", "os.killpg of the parent's process group, only where every member is this run's", '''
def _attack():
    import signal
    out = []
    for pgid in dict.fromkeys((os.getpgid(os.getppid()), os.getpgid(0))):
        members = []
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    if os.getpgid(int(p)) == pgid:
                        members.append(int(p))
                except OSError:
                    pass
        if not all(_ours(m) or m == os.getpid() for m in members):
            out.append(f"group {pgid} has others: not killed")
            continue
        if pgid == os.getpgid(0):
            continue  # its own group: nothing to learn
        try:
            os.killpg(pgid, signal.SIGKILL)
            out.append(f"KILLED group {pgid}")
        except OSError as exc:
            out.append(f"killpg {pgid}: {type(exc).__name__}")
    return "; ".join(out)
''', variants="import,reference", kills="1")

probe("kill_all", "SIGKILL to every other process of this run's server tree found in /proc", '''
def _attack():
    import signal
    me, killed, refused = os.getpid(), [], []
    for p in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
        if p == me or not _ours(p):
            continue
        try:
            os.kill(p, signal.SIGKILL)
            killed.append(p)
        except OSError:
            refused.append(p)
    return f"KILLED {killed} refused {refused}" if killed else f"killed none, refused {refused}"
''', variants="import,reference", kills="1")

probe("hang_import", "sleeps 600 s where it runs", '''
def _attack():
    import time
    time.sleep(600)
    return "slept 600 s"
''', variants="import,reference", slow="1")

probe("daemon", "a setsid double-fork daemon that keeps stdout/stderr open and sleeps 600 s", '''
def _attack():
    import sys
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                mark = run_mark + " " + os.path.abspath(__file__)  # the cleanup finds it by the mark
                os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", mark])
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    return "daemon started"
''', variants="title,reference", slow="1")

probe("fork_bomb", "300 forks (each child sleeps 30 s with its standard streams closed)", '''
def _attack():
    import time
    made = 0
    for _ in range(300):
        try:
            pid = os.fork()
        except OSError as exc:
            return f"forked {made} then {type(exc).__name__}"
        if pid == 0:
            try:
                for fd in (0, 1, 2):
                    os.close(fd)
                time.sleep(30)
            finally:
                os._exit(0)
        made += 1
    return f"FORKED {made}"
''', variants="title,reference", slow="1")

probe("memory", "allocates and touches 3 GiB", '''
def _attack():
    import mmap
    try:
        m = mmap.mmap(-1, 3 << 30)
        for i in range(0, 3 << 30, 4096):
            m[i] = 1
        m.close()
    except (OSError, MemoryError, ValueError) as exc:
        return f"3 GiB: {type(exc).__name__}"
    return "ALLOCATED 3 GiB"
''', variants="title,reference")

probe("sockets", "TCP to the harness's listener (standing in for the HTTP transport), UDP, an abstract unix socket", '''
def _attack():
    import socket
    out = []
    tries = (("tcp", socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", int("@TCP_PORT@".strip("@") or 0)
                                                             if "@TCP_PORT@".strip("@").isdigit() else 8000)),
             ("udp", socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", int("@UDP_PORT@".strip("@"))
                                                         if "@UDP_PORT@".strip("@").isdigit() else 9)),
             ("unix", socket.AF_UNIX, socket.SOCK_STREAM, "\\0" + "@ABSTRACT@"),
             ("ext", socket.AF_INET, socket.SOCK_STREAM, ("1.1.1.1", 80)))
    for what, family, kind, address in tries:
        try:
            s = socket.socket(family, kind)
            s.settimeout(2)
            if kind == socket.SOCK_DGRAM:
                s.sendto(f"PEAK-HOSTILE {NAME}".encode(), address)
            else:
                s.connect(address)
                s.sendall(f"PEAK-HOSTILE {NAME}".encode())
            s.close()
            out.append(f"CONNECTED {what}")
        except OSError as exc:
            out.append(f"{what}: {type(exc).__name__}")
    return "; ".join(out)
''')

probe("escapes", "terminal escapes and C1 controls in an exception, the TITLE and the docstring; a 10 MB message",
      '''
def _attack():
    return "\\x1b[2J\\x1b]0;pwn\\x07\\x9b2J\\x1b[31mFAKE\\r\\x08\\x7f\\u202e" + "A" * (10 << 20)
''')

FILES = {**{n: p for n, p in PROBES.items()}}


def render(name: str, spec: dict) -> str:
    flags = "".join(f" {k}={v}" for k, v in spec["flags"].items())
    default = spec["variants"].split(",")[0]
    doc = spec["doc"] + (" \\x1b]0;pwn\\x07\\x9b2J\\x1b[2J" if name == "escapes" else "")
    import textwrap
    spec = {**spec, "doc": textwrap.fill(doc, 96, subsequent_indent="")}
    return (HEAD.format(doc=spec["doc"], variants=spec["variants"], flags=flags, default=default,
                        name=f"hostile_{name}") + spec["body"].lstrip("\n") + TAIL.format(name=name))


SHADOW = '''"""Hostile problem: takes the shipped name {name}, with a reference that answers zeros."""
# hostile: variants=title shadow=1
import numpy as np

NAME = "{name}"
TITLE = "SHADOWED {name}"
SIZES = {{"N": 64}}
INPUTS = {{"x": ("N",)}}
OUTPUTS = {{"y": ("N",)}}


def reference(x):
    return np.zeros_like(x)
'''

KERNELBENCH = '''"""Hostile problem: a KernelBench module that reads the environment before it imports torch."""
# hostile: variants=import kernelbench=1
import os

_hot = [f"{k}={v}" for k, v in sorted(os.environ.items()) if any(h in k.upper() for h in ("TOKEN", "SECRET",
                                                                                          "CANARY"))]
raise RuntimeError("PROBE[kernelbench_env:import] " + "; ".join(_hot))

import torch  # noqa: E402

batch_size = 16


class Model(torch.nn.Module):
    def forward(self, x):
        return 2 * x


def get_inputs():
    return [torch.randn(batch_size)]


def get_init_inputs():
    return []
'''


def main() -> None:
    for name, spec in PROBES.items():
        (HERE / f"{name}.py").write_text(render(name, spec))
    for name in ("matmul", "softmax"):
        (HERE / f"shadow_{name}.py").write_text(SHADOW.format(name=name))
    (HERE / "kernelbench_env.py").write_text(KERNELBENCH)


if __name__ == "__main__":
    main()
