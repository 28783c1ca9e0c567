"""Hostile problem: TCP to the harness's listener (standing in for the HTTP transport), UDP, an abstract unix socket"""
# hostile: variants=import,title,reference
import os

where = "import"  # the harness rewrites this line: import | title | reference | naive
run_mark = "@RUN_MARK@"
canary_dir = "@CANARY_DIR@"

NAME = "hostile_sockets"
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
    import socket
    out = []
    tries = (("tcp", socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", int("@TCP_PORT@".strip("@") or 0)
                                                             if "@TCP_PORT@".strip("@").isdigit() else 8000)),
             ("udp", socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", int("@UDP_PORT@".strip("@"))
                                                         if "@UDP_PORT@".strip("@").isdigit() else 9)),
             ("unix", socket.AF_UNIX, socket.SOCK_STREAM, "\0" + "@ABSTRACT@"),
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


def _report(found):
    return f"PROBE[{NAME}:{where}] {found}"


_found = _attack() if where in ("import", "title", "naive") else ""
if where == "import":
    raise RuntimeError(_report(_found))
TITLE = (_report(_found) if "escapes" in NAME else _safe(_report(_found)))[:200] if where == "title" else \
    "hostile probe sockets"
NAIVE = {"hlsl": KERNEL + ("// " + _safe(_found) + "\n" if where == "naive" else "")}


def reference(x):
    if where == "reference" and x.size >= 1000:  # the session's sizes, not describe's small ones
        raise RuntimeError(_report(_attack()))
    return 2 * x
