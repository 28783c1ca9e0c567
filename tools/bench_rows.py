"""Benchmark the row-problem example kernels (softmax, rmsnorm, row_sum) on a CUDA GPU, without the server.

    python3 tools/bench_rows.py --out $OUT/rows.json

For each problem and dtype (f32, bf16 by default) every CUDA example under examples/<problem>/cuda/ is compiled
with NVRTC through CuPy (its `typedef float T;` line rewritten for the dtype, its tuning parameters defined at
their defaults), checked against a float64 reference at the timed size (8192 x 8192) and at odd sizes (1x1,
7x1001, 33x4099; outputs poisoned with NaN first), and timed with CUDA events: warm-up launches, then >= 20 reps,
each after an L2 flush, the median reported. The flush writes a 256 MB buffer and then reads a 128 MB one: the
read makes the L2 write the flush's dirty lines back before the timed launch (written alone, the flush leaves
about the L2's size of dirty lines that the next kernel pays to write back: some 15 us on an H100, a sixth of a
bf16 row_sum at 8192 x 8192). --dirty-flush keeps the write alone. Bandwidth counts the minimum bytes: inputs
read once, outputs written once; it is compared with a device-to-device copy of a 1 GiB buffer timed the same way.
torch eager and torch.compile of the same operation are timed as yardsticks (torch.compile is skipped, with the
reason, where it fails or the time budget is short).

Needs python3 with cupy, numpy and (for the yardsticks) torch; no part of peak_mcp (its server's dependencies are
not on the GPU machine). Kernels run in child processes, one per problem and dtype: a kernel that faults (a
sticky CUDA error) or hangs is reported in the table and the child restarts with the next kernel. One markdown
table goes to stdout (and <out>.md), the JSON to --out ($OUT/rows.json by default).

--sweep N also times up to N configurations of each kernel's `// peak: params` space (at the timed size only), the
default first, then the space in order (the last parameter varying fastest). --match 4_ 7_ keeps the kernels whose
file names contain any of the strings.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import os
import queue
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = ("softmax", "rmsnorm", "row_sum")
C_TYPES = {"f32": "float", "f16": "__half", "bf16": "__nv_bfloat16"}
ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2}
TOLERANCE = {"f32": 1e-5, "f16": 4e-3, "bf16": 1e-2}  # max error / scale, per element
ODD_SIZES = ((1, 1), (7, 1001), (33, 4099))
FLUSH_BYTES = 256 << 20
CLEAN_BYTES = 128 << 20
COPY_BYTES = 1 << 30
EPS = 1e-6  # rmsnorm

# --- the `// peak:` annotation (a small reader of its own: peak_mcp.core.launch needs pydantic) -----------------------

_LINE = re.compile(r"^\s*//\s*peak\s*:(.*)$", re.MULTILINE)
_FUNCS = {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max}
_BIN = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}
_CMP = {ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
        ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}


def evaluate(expr: str, env: dict[str, int]) -> int:
    """An integer expression over sizes and parameters: literals, names, + - * // %, comparisons, and/or/not,
    cdiv/min/max. Anything else raises ValueError (never eval)."""

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id in env:
            return env[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
            return _BIN[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return int(not ev(node.operand))
        if isinstance(node, ast.BoolOp):
            values = [ev(v) for v in node.values]
            return int(all(values) if isinstance(node.op, ast.And) else any(values))
        if isinstance(node, ast.Compare):
            left = ev(node.left)
            for op, right_node in zip(node.ops, node.comparators, strict=True):
                right = ev(right_node)
                if type(op) not in _CMP or not _CMP[type(op)](left, right):
                    return 0
                left = right
            return 1
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS:
            return int(_FUNCS[node.func.id](*[ev(a) for a in node.args]))
        raise ValueError(f"cannot evaluate {ast.unparse(node)!r} in {expr!r}")

    return ev(ast.parse(expr.strip(), mode="eval").body)


def _fields(body: str) -> list[tuple[str, str]]:
    """`k=v k=(a, b) k=[1, 2]` as (key, value) pairs, brackets respected."""
    out, pos = [], 0
    while pos < len(body):
        match = re.compile(r"\s*(\w+)\s*=\s*").match(body, pos)
        if not match:
            break
        key, pos, depth, start = match.group(1), match.end(), 0, match.end()
        while pos < len(body) and (depth or not body[pos].isspace()):
            depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(body[pos], 0)
            pos += 1
        out.append((key, body[start:pos]))
    return out


def parse_annotation(source: str) -> dict[str, Any]:
    launch: dict[str, str] = {}
    params: dict[str, list[int]] = {}
    where: list[str] = []
    for match in _LINE.finditer(source):
        body = match.group(1).strip()
        if body.startswith("params"):
            for name, text in _fields(body[len("params"):]):
                node = ast.parse(text, mode="eval").body
                if isinstance(node, ast.Call):  # range(a, b[, step])
                    params[name] = list(range(*[evaluate(ast.unparse(a), {}) for a in node.args]))
                else:
                    params[name] = [evaluate(ast.unparse(e), {}) for e in node.elts]  # type: ignore[attr-defined]
        elif body.startswith("where"):
            where.append(body.split("=", 1)[1].strip())
        else:
            launch.update(_fields(body))
    if "entry" not in launch or "grid" not in launch or "block" not in launch:
        raise ValueError("no `// peak: entry=... grid=(...) block=(...)` line")
    return {"entry": launch["entry"], "grid": launch["grid"], "block": launch["block"],
            "shared": launch.get("shared", "0"), "params": params, "where": where}


def geometry(spec: dict[str, Any], sizes: dict[str, int], config: dict[str, int]) -> dict[str, Any]:
    env = {**sizes, **config}

    def triple(text: str) -> tuple[int, int, int]:
        node = ast.parse(text.strip(), mode="eval").body
        dims = tuple(evaluate(ast.unparse(e), env) for e in getattr(node, "elts", [node]))
        if len(dims) != 3 or min(dims) < 1:
            raise ValueError(f"{text} gives {dims} at {env}")
        return dims  # type: ignore[return-value]

    return {"grid": triple(spec["grid"]), "block": triple(spec["block"]), "shared": evaluate(spec["shared"], env)}


def configs(spec: dict[str, Any], sizes: dict[str, int], limit: int) -> list[dict[str, int]]:
    """The default configuration first, then others of the space that meet every `where`, up to `limit`."""
    names = list(spec["params"])
    default = {n: v[0] for n, v in spec["params"].items()}
    out = [default]
    for values in itertools.product(*(spec["params"][n] for n in names)):
        if len(out) >= limit:
            break
        config = dict(zip(names, values, strict=True))
        if config != default and all(evaluate(w, {**sizes, **config}) for w in spec["where"]):
            out.append(config)
    return out


def kernel_source(source: str, dtype: str, config: dict[str, int]) -> str:
    """The kernel as compiled for a dtype and a configuration: its `typedef float T;` line rewritten, a #define per
    parameter, then `#line 1` so NVRTC's messages keep the file's line numbers."""
    if dtype != "f32":
        source, count = re.subn(r"^typedef float T;", f"typedef {C_TYPES[dtype]} T;", source, count=1, flags=re.M)
        if not count:
            raise ValueError("no `typedef float T;` line: the kernel is for f32 only")
    defines = "".join(f"#define {k} {v}\n" for k, v in config.items())
    return f"{defines}#line 1\n{source}" if defines else source


def min_bytes(problem: str, rows: int, cols: int, dtype: str) -> int:
    size = ITEMSIZE[dtype]
    if problem == "softmax":
        return 2 * rows * cols * size
    if problem == "rmsnorm":
        return 2 * rows * cols * size + cols * size
    return rows * cols * size + rows * 4


# --- the child: one problem and dtype, every kernel given ---------------------------------------------------------


def include_dirs() -> list[str]:
    """Directories with cuda_fp16.h / cuda_bf16.h for NVRTC."""
    found = []
    for env in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(env):
            found.append(os.path.join(os.environ[env], "include"))
    found.append("/usr/local/cuda/include")
    try:
        from cuda import pathfinder  # type: ignore[import-not-found]

        found.append(pathfinder.find_nvidia_header_directory("cudart"))
    except Exception:
        pass
    return [d for d in dict.fromkeys(found) if d and os.path.isfile(os.path.join(d, "cuda_fp16.h"))]


class Runner:
    """Compiles, checks and times kernels for one problem and dtype with CuPy."""

    def __init__(self, problem: str, dtype: str, rows: int, cols: int, reps: int, dirty: bool) -> None:
        import cupy as cp

        self.cp, self.problem, self.dtype, self.reps = cp, problem, dtype, reps
        self.size = (rows, cols)
        self.includes = tuple(f"-I{d}" for d in include_dirs())
        self.flush = Flush(cp, dirty)
        self.data: dict[tuple[int, int], dict[str, Any]] = {}
        self.optin: dict[int, tuple[Any, int]] = {}  # id -> (kernel, dynamic shared bytes it was opted in to)

    # data and reference -------------------------------------------------------------------------------------
    def _store(self, values: Any) -> Any:
        """float32 values in the session's storage: f32, f16, or bf16 bits (round to nearest even) as uint16."""
        cp = self.cp
        if self.dtype == "f32":
            return values.astype(cp.float32)
        if self.dtype == "f16":
            return values.astype(cp.float16)
        bits = values.astype(cp.float32).view(cp.uint32)
        return ((bits + ((bits >> 16) & 1) + 0x7FFF) >> 16).astype(cp.uint16)

    def _decode(self, stored: Any) -> Any:
        cp = self.cp
        if self.dtype == "bf16":
            return (stored.astype(cp.uint32) << 16).view(cp.float32).astype(cp.float64)
        return stored.astype(cp.float64)

    def case(self, rows: int, cols: int) -> dict[str, Any]:
        if (rows, cols) in self.data:
            return self.data[(rows, cols)]
        cp = self.cp
        if len(self.data) > 1:  # keep the timed size and one other
            self.data = {k: v for k, v in self.data.items() if k == self.size}
        state = cp.random.RandomState(rows * 100003 + cols)
        x = self._store(state.uniform(-4.0, 4.0, (rows, cols)).astype(cp.float32))
        x64 = self._decode(x)
        inputs, out_dtype = [x], (cp.float32 if self.problem == "row_sum" else x.dtype)
        if self.problem == "softmax":
            e = cp.exp(x64 - x64.max(axis=1, keepdims=True))
            ref = e / e.sum(axis=1, keepdims=True)
            scale = cp.abs(ref)
            shape = (rows, cols)
        elif self.problem == "rmsnorm":
            w = self._store(state.uniform(0.5, 1.5, (cols,)).astype(cp.float32))
            inputs.append(w)
            ref = x64 / cp.sqrt((x64 * x64).mean(axis=1, keepdims=True) + EPS) * self._decode(w)[None, :]
            scale = cp.maximum(cp.abs(ref), 1e-3 * cp.sqrt((ref * ref).mean()))
            shape = (rows, cols)
        else:
            ref = x64.sum(axis=1)
            scale = cp.abs(x64).sum(axis=1)  # a sum is conditioned by sum |x|
            shape = (rows,)
        y = cp.empty(shape, dtype=out_dtype)
        self.data[(rows, cols)] = {"inputs": inputs, "y": y, "ref": ref, "scale": cp.maximum(scale, 1e-30)}
        return self.data[(rows, cols)]

    def poison(self, y: Any) -> None:
        if y.dtype == self.cp.float32:
            y.fill(float("nan"))
        else:
            y.view(self.cp.uint16).fill(0x7FFF if self.dtype == "bf16" else 0x7E00)

    # compile, launch, check, time -------------------------------------------------------------------------
    def compile(self, source: str, config: dict[str, int], entry: str) -> Any:
        module = self.cp.RawModule(code=kernel_source(source, self.dtype, config),
                                   options=("-std=c++17", *self.includes), backend="nvrtc")
        return module.get_function(entry)

    def launch(self, kernel: Any, geo: dict[str, Any], case: dict[str, Any], rows: int, cols: int) -> None:
        import numpy  # RawKernel takes numpy scalars for int arguments

        if geo["shared"] > self.optin.get(id(kernel), (None, 48 * 1024))[1]:  # beyond 48 KB a launch needs the
            kernel.max_dynamic_shared_size_bytes = geo["shared"]  # opt-in, as the server's does (once per kernel,
            self.optin[id(kernel)] = (kernel, geo["shared"])  # kept alive so its id is never another's)
        kernel(geo["grid"], geo["block"], (*case["inputs"], case["y"], numpy.int32(rows), numpy.int32(cols)),
               shared_mem=geo["shared"])

    def check(self, kernel: Any, spec: dict[str, Any], config: dict[str, int], rows: int, cols: int) -> float:
        """The largest error / scale of one launch on poisoned outputs, a second launch must give the same bits."""
        cp = self.cp
        case = self.case(rows, cols)
        geo = geometry(spec, {"ROWS": rows, "COLS": cols}, config)
        outs = []
        for _ in range(2):
            self.poison(case["y"])
            self.launch(kernel, geo, case, rows, cols)
            cp.cuda.Device().synchronize()
            outs.append(case["y"].copy())
        if not bool(cp.array_equal(outs[0].view(cp.uint8), outs[1].view(cp.uint8))):
            raise RuntimeError("two launches gave different bits")
        out = self._decode(outs[0]) if outs[0].dtype != cp.float32 else outs[0].astype(cp.float64)
        if not bool(cp.isfinite(out).all()):
            bad = int((~cp.isfinite(out)).sum())
            raise RuntimeError(f"{bad} of {out.size} outputs not finite (unwritten: outputs start as NaN)")
        return float((cp.abs(out - case["ref"]) / case["scale"]).max())

    def time_launches(self, launch: Any) -> float:
        """Median milliseconds of `reps` launches, each after an L2 flush."""
        cp = self.cp
        for _ in range(3):
            launch()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        times = []
        for _ in range(self.reps):
            self.flush()
            start.record()
            launch()
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end))
        return statistics.median(times)

    def evaluate(self, path: Path, sweep: int) -> dict[str, Any]:
        source = path.read_text()
        spec = parse_annotation(source)
        rows, cols = self.size
        sizes = {"ROWS": rows, "COLS": cols}
        result: dict[str, Any] = {"kernel": path.name, "entry": spec["entry"], "configs": []}
        tol = TOLERANCE[self.dtype]
        for n, config in enumerate(configs(spec, sizes, max(1, sweep))):
            entry: dict[str, Any] = {"config": config}
            result["configs"].append(entry)
            try:
                kernel = self.compile(source, config, spec["entry"])
                entry["error"] = self.check(kernel, spec, config, rows, cols)
                if n == 0:  # the default configuration: the odd sizes too
                    entry["odd_errors"] = {f"{r}x{c}": self.check(kernel, spec, config, r, c) for r, c in ODD_SIZES}
                worst = max([entry["error"], *entry.get("odd_errors", {}).values()])
                entry["correct"] = worst <= tol
                case = self.case(rows, cols)
                geo = geometry(spec, sizes, config)
                entry["geometry"] = geo
                entry["ms"] = self.time_launches(
                    lambda k=kernel, g=geo, c=case: self.launch(k, g, c, rows, cols))
                entry["gbps"] = min_bytes(self.problem, rows, cols, self.dtype) / entry["ms"] / 1e6
            except Exception as exc:  # reported, never fatal; a sticky CUDA error ends the child (see child())
                entry["failure"] = f"{type(exc).__name__}: {str(exc).strip()[:600]}"
                if not context_alive(self.cp):
                    raise StickyError(entry["failure"]) from None
        return result


class StickyError(RuntimeError):
    """The CUDA context is unusable (an illegal address, a trap): the child must restart."""


class Flush:
    """Evicts the L2 between timed launches: a 256 MB write, then (unless `dirty`) a 128 MB read so the write's
    dirty lines are written back before the clock starts."""

    def __init__(self, xp: Any, dirty: bool) -> None:
        self.xp, self.buffer = xp, xp.empty(FLUSH_BYTES, dtype=xp.uint8)
        self.clean = None if dirty else xp.ones(CLEAN_BYTES, dtype=xp.uint8)

    def __call__(self) -> None:
        if self.xp.__name__ == "torch":
            self.buffer.fill_(1)
        else:
            self.buffer.fill(1)
        if self.clean is not None:
            self.clean.max()  # a read of every byte, on the same stream


def context_alive(cp: Any) -> bool:
    try:
        cp.cuda.Device().synchronize()
        probe = cp.arange(4)
        return int(probe.sum()) == 6
    except Exception:
        return False


def child(args: argparse.Namespace) -> int:
    """Evaluate kernels one by one, one JSON line per event on stdout; exit 3 after a sticky CUDA error."""
    runner = Runner(args.problem, args.dtype, args.rows, args.cols, args.reps, args.dirty_flush)
    for name in args.kernels:
        print(json.dumps({"event": "start", "kernel": name}), flush=True)
        try:
            result = runner.evaluate(ROOT / "examples" / args.problem / "cuda" / name, args.sweep)
        except StickyError as exc:
            print(json.dumps({"event": "result", "kernel": name, "configs": [], "failure": str(exc)}), flush=True)
            return 3
        except Exception as exc:
            result = {"kernel": name, "configs": [], "failure": f"{type(exc).__name__}: {str(exc)[:600]}"}
        print(json.dumps({"event": "result", **result}), flush=True)
    return 0


def one_child(command: list[str], limit_s: float, deadline: float) -> tuple[list[dict[str, Any]], str | None, str]:
    """Run one child: the results it reported, the kernel in flight when it stopped (None when it finished them
    all), and why it stopped early."""
    results: list[dict[str, Any]] = []
    current, why = None, ""
    with tempfile.TemporaryFile(mode="w+") as errors:  # a file, not a pipe: a chatty child never blocks on it
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            for line in proc.stdout or ():
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        hung = False
        while True:  # one event at a time, each within the per-kernel limit
            try:
                line = lines.get(timeout=max(1.0, min(limit_s, deadline - time.monotonic())))
            except queue.Empty:
                hung = True
                proc.kill()
                break
            if line is None:
                break
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.pop("event", None) == "start":
                current = event["kernel"]
            elif "kernel" in event:
                results.append(event)
                current = None
        proc.wait()
        errors.seek(0)
        tail = " / ".join(errors.read().strip().splitlines()[-2:])[-400:]  # the exception's line
        if hung:
            why = "no answer within the time limit (a hang?)"
        elif proc.returncode not in (0, 3):
            why = f"the child process died (exit {proc.returncode})"
        why += f": {tail}" if why and tail else ""
    return results, current, why


def run_children(problem: str, dtype: str, kernels: list[str], args: argparse.Namespace,
                 deadline: float) -> list[dict[str, Any]]:
    """The kernels' results, restarting the child after a fault or a hang (that kernel is reported failed)."""
    results: list[dict[str, Any]] = []
    todo = list(kernels)
    while todo:
        if deadline - time.monotonic() < 5:
            results += [{"kernel": k, "configs": [], "failure": "skipped: the time budget ran out"} for k in todo]
            break
        command = [sys.executable, __file__, "--child", "--problem", problem, "--dtype", dtype, "--rows",
                   str(args.rows), "--cols", str(args.cols), "--reps", str(args.reps), "--sweep", str(args.sweep),
                   *(["--dirty-flush"] if args.dirty_flush else []), "--kernels", *todo]
        done, current, why = one_child(command, args.kernel_timeout * max(1, args.sweep), deadline)
        results += done
        todo = [k for k in todo if k not in {r["kernel"] for r in done}]
        if current is not None and current in todo:  # in flight when the child died or hung
            results.append({"kernel": current, "configs": [], "failure": why or "the child stopped"})
            todo.remove(current)
        elif todo and why:  # died before starting a kernel (e.g. no cupy): the rest would fail the same way
            results += [{"kernel": k, "configs": [], "failure": why} for k in todo]
            break
    order = {k: i for i, k in enumerate(kernels)}
    return sorted(results, key=lambda r: order.get(r["kernel"], 0))


# --- yardsticks: copy bandwidth, torch eager, torch.compile ---------------------------------------------------


def copy_bandwidth(reps: int, dirty: bool) -> dict[str, Any]:
    import cupy as cp

    src, dst = cp.ones(COPY_BYTES, dtype=cp.uint8), cp.empty(COPY_BYTES, dtype=cp.uint8)
    flush = Flush(cp, dirty)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(3):
        cp.copyto(dst, src)
    times = []
    for _ in range(reps):
        flush()
        start.record()
        cp.copyto(dst, src)
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end))
    ms = statistics.median(times)
    del src, dst, flush
    cp.get_default_memory_pool().free_all_blocks()
    device = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    return {"copy_ms": ms, "copy_gbps": 2 * COPY_BYTES / ms / 1e6, "device": device["name"].decode(),
            "sms": device["multiProcessorCount"], "l2_bytes": device["l2CacheSize"]}


def torch_yardsticks(problem: str, dtype: str, rows: int, cols: int, reps: int, compile_ok: bool,
                     dirty: bool) -> dict[str, Any]:
    import torch

    torch_dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    x = (torch.rand(rows, cols, device="cuda") * 8 - 4).to(torch_dtype)
    w = (torch.rand(cols, device="cuda") + 0.5).to(torch_dtype)
    ops = {
        "softmax": lambda x, w: torch.softmax(x, dim=-1),
        "rmsnorm": lambda x, w: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + EPS)
                                 * w.float()).to(x.dtype),
        "row_sum": lambda x, w: x.float().sum(1),
    }
    op = ops[problem]
    flush = Flush(torch, dirty)
    flush.buffer, flush.clean = flush.buffer.cuda(), None if dirty else flush.clean.cuda()

    def timed(fn: Any) -> float:
        for _ in range(3):
            fn(x, w)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(reps):
            flush()
            start.record()
            fn(x, w)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    out: dict[str, Any] = {"torch_eager_ms": timed(op)}
    if not compile_ok:
        out["torch_compile_skipped"] = "the time budget is too short for torch.compile"
        return out
    try:
        t0 = time.perf_counter()
        compiled = torch.compile(op, dynamic=False)
        compiled(x, w)
        torch.cuda.synchronize()
        out["torch_compile_s"] = time.perf_counter() - t0
        out["torch_compile_ms"] = timed(compiled)
    except Exception as exc:
        out["torch_compile_skipped"] = f"torch.compile failed: {type(exc).__name__}: {str(exc).strip()[:300]}"
    return out


# --- the report -------------------------------------------------------------------------------------------------


def cell(text: str, limit: int = 200) -> str:
    return " ".join(text.split())[:limit].replace("|", "/")


def table(report: dict[str, Any]) -> str:
    copy = report.get("copy", {})
    copy_gbps = copy.get("copy_gbps")
    lines = [f"Device: {copy.get('device', '?')} ({copy.get('sms', '?')} SMs); device-to-device copy of 1 GiB: "
             f"{copy_gbps or float('nan'):.0f} GB/s (read + write). Size {report['rows']}x{report['cols']}, "
             f"median of {report['reps']} reps after an L2 flush ({report['flush']}); GB/s counts inputs read once and "
             "outputs written once.", "",
             f"| problem | dtype | kernel | config | ms | GB/s | % of copy | max error / scale ({report['rows']}x"
             f"{report['cols']}, {', '.join(f'{r}x{c}' for r, c in ODD_SIZES)}) | status |",
             "|---|---|---|---|---|---|---|---|---|"]
    for group in report["groups"]:
        for kernel in group["kernels"]:
            if not kernel["configs"]:
                lines.append(f"| {group['problem']} | {group['dtype']} | {kernel['kernel']} | | | | | | "
                             f"FAILED: {cell(kernel.get('failure', '?'))} |")
            for entry in kernel["configs"]:
                config = " ".join(f"{k}={v}" for k, v in entry["config"].items())
                if "failure" in entry:
                    status = f"FAILED: {cell(entry['failure'])}"
                else:
                    status = "ok" if entry.get("correct") else "WRONG"
                ms, gbps = entry.get("ms"), entry.get("gbps")
                pct = f"{100 * gbps / copy_gbps:.0f}%" if gbps and copy_gbps else ""
                errors = [entry.get("error"), *entry.get("odd_errors", {}).values()]
                err = ", ".join(f"{e:.1e}" for e in errors if e is not None)
                lines.append(f"| {group['problem']} | {group['dtype']} | {kernel['kernel']} | {config} | "
                             f"{f'{ms:.4f}' if ms else ''} | {f'{gbps:.0f}' if gbps else ''} | {pct} | {err} | "
                             f"{status} |")
        torch_result = group.get("torch", {})
        nbytes = min_bytes(group["problem"], report["rows"], report["cols"], group["dtype"])
        for key, label in (("torch_eager_ms", "torch eager"), ("torch_compile_ms", "torch.compile")):
            ms = torch_result.get(key)
            if ms:
                gbps = nbytes / ms / 1e6
                pct = f"{100 * gbps / copy_gbps:.0f}%" if copy_gbps else ""
                lines.append(f"| {group['problem']} | {group['dtype']} | {label} | | {ms:.4f} | {gbps:.0f} | {pct} "
                             "| | yardstick |")
        for key in ("torch_compile_skipped", "torch_failure"):
            if torch_result.get(key):
                lines.append(f"| {group['problem']} | {group['dtype']} | torch.compile | | | | | | "
                             f"skipped: {cell(torch_result[key])} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="JSON report (default: $OUT/rows.json)")
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=PROBLEMS)
    parser.add_argument("--dtypes", nargs="+", default=["f32", "bf16"], choices=list(C_TYPES))
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--cols", type=int, default=8192)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--sweep", type=int, default=1, help="configurations timed per kernel (1: the default)")
    parser.add_argument("--match", nargs="+", default=[""],
                        help="only kernels whose file name contains one of these (e.g. --match 4_ 7_)")
    parser.add_argument("--budget", type=float, default=225.0, help="seconds for the whole run")
    parser.add_argument("--kernel-timeout", type=float, default=60.0)
    parser.add_argument("--dirty-flush", action="store_true", help="flush by a write alone (no read after it)")
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--problem", help=argparse.SUPPRESS)
    parser.add_argument("--dtype", help=argparse.SUPPRESS)
    parser.add_argument("--kernels", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    t_start = time.monotonic()
    deadline = t_start + args.budget
    out_path = args.out or (Path(os.environ["OUT"]) / "rows.json" if os.environ.get("OUT") else Path("rows.json"))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"rows": args.rows, "cols": args.cols, "reps": args.reps, "groups": [],
                              "flush": "write 256 MB" + ("" if args.dirty_flush else ", then read 128 MB")}
    try:
        report["copy"] = copy_bandwidth(args.reps, args.dirty_flush)
    except Exception as exc:
        report["copy"] = {"failure": f"{type(exc).__name__}: {exc}"}
    for problem in args.problems:
        kernels = sorted(p.name for p in (ROOT / "examples" / problem / "cuda").glob("*.cu")
                         if any(m in p.name for m in args.match))
        for dtype in args.dtypes:
            group: dict[str, Any] = {"problem": problem, "dtype": dtype}
            group["kernels"] = run_children(problem, dtype, kernels, args, deadline - 25 * (not args.no_torch))
            report["groups"].append(group)
            print(f"[{time.monotonic() - t_start:.0f} s] {problem} {dtype}: {len(kernels)} kernels", file=sys.stderr)
    if not args.no_torch:
        groups = report["groups"]
        for i, group in enumerate(groups):
            left = deadline - time.monotonic()
            compile_ok = not args.no_compile and left > 15 + 10 * (len(groups) - i)
            try:
                group["torch"] = torch_yardsticks(group["problem"], group["dtype"], args.rows, args.cols,
                                                  args.reps, compile_ok, args.dirty_flush)
            except Exception as exc:
                group["torch"] = {"torch_failure": f"{type(exc).__name__}: {str(exc)[:300]}"}
    report["wall_s"] = time.monotonic() - t_start
    text = table(report)
    print(text)
    out_path.write_text(json.dumps(report, indent=1))
    out_path.with_suffix(".md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
