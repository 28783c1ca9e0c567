"""Where a problem file's reference time goes: the worker's reference path (inputs, the float64 and float32
references, the error scale, the spot check's `reference_at`) against a real problem host, started by the launcher
the pool uses (problem_hosts.start_host) and reached over its socket and wire, with a per-step wall-time table.
A benchmark, not a test.

    .venv/bin/python tools/bench_reference.py build/kernelbench/40_LayerNorm.py \\
        --sizes BATCH_SIZE=4,FEATURES=16,DIM1=64,DIM2=64
    python3 tools/bench_reference.py build/kernelbench/89_cumsum.py --repeat 3       # on a GPU: cupy, host on GPU 0

The validator's array module is cupy on GPU 0 where one is usable (the host then computes there too), else numpy.
Each round is what one validation trial with a cold reference cache pays: make_inputs, steps._reference (on a GPU
with its spot check), then the recheck's host spot check (reference_at, as steps._host_spot_check calls it after
timing; on a GPU only in the server, timed here on either). Round 1 also pays the host's first build of the model;
later rounds are what a fresh-inputs revalidation pays. Every host call is split by the host's own progress notes:
`in` (the request crossing and decoding), `host` (the problem's function), `out` (the answer encoded and crossing);
`worker` is a phase's wall time outside host calls (conversions, checks, the bound).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from peak_mcp.problems import file_calls
from peak_mcp.runner import problem_link


def fail(line: str) -> None:
    print(f"bench_reference: {line}", file=sys.stderr)
    sys.exit(2)


def parse_sizes(text: str) -> dict[str, int]:
    sizes = {}
    for item in filter(None, text.split(",")):
        key, eq, value = item.partition("=")
        if not eq or not key.strip() or not value.strip().isdigit():
            fail(f"--sizes item {item!r} is not SYMBOL=INTEGER (e.g. --sizes M=2048,K=65536)")
        sizes[key.strip()] = int(value)
    return sizes


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        fail(message)  # one line, exit 2 (argparse prints its usage first)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("problem", help="a problem file (peak-mcp's format or a KernelBench module)")
    parser.add_argument("--sizes", default="", help="SYMBOL=N,... (the rest at the file's defaults)")
    parser.add_argument("--dtype", default=None, help="the session's dtype (default: the file's first)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=2, help="rounds (the first pays the host's model build)")
    parser.add_argument("--cpu", action="store_true", help="numpy and a CPU host even where a GPU is")
    parser.add_argument("--sandbox", action="store_true", help="the host confined as a server's pool starts it")
    args = parser.parse_args(argv)
    if not Path(args.problem).is_file():
        fail(f"no such problem file: {args.problem}")
    if args.repeat < 1:
        fail(f"--repeat {args.repeat} must be at least 1")
    args.sizes = parse_sizes(args.sizes)
    return args


def array_module(cpu: bool) -> tuple[Any, str, int]:
    """(xp, backend, device index) as a CUDA worker would have them, else numpy without a device."""
    if not cpu:
        try:
            import cupy

            cupy.cuda.Device(0).use()
            float(cupy.arange(3).sum())
            return cupy, "cuda", 0
        except Exception:
            pass
    return np, "cuda", -1


class Recorder:
    """Host calls and wrapped worker steps, each under the phase in progress."""

    def __init__(self, xp: Any) -> None:
        self.xp = xp
        self.phase = ""
        self.calls: list[dict[str, Any]] = []
        self.steps: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
        self.phases: dict[str, float] = defaultdict(float)
        self.notes: list[tuple[float, str]] = []

    def sync(self) -> None:
        if self.xp is not np:
            self.xp.cuda.Device().synchronize()

    def note(self, text: str) -> None:
        self.notes.append((time.perf_counter(), text))

    def wrap(self, owner: Any, name: str, label: str) -> None:
        """`owner.name` timed as a worker step (device work synchronized at its end)."""
        original = getattr(owner, name, None)
        if original is None:
            return

        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.sync()
                entry = self.steps[(self.phase, label)]
                entry[0] += 1
                entry[1] += time.perf_counter() - began

        setattr(owner, name, timed)

    def run(self, phase: str, fn: Any) -> Any:
        self.phase = phase
        self.sync()
        began = time.perf_counter()
        try:
            return fn()
        finally:
            self.sync()
            self.phases[phase] += time.perf_counter() - began


class TimedCode(problem_link.RemoteCode):
    """The worker's link, each request timed and its bytes counted."""

    recorder: Recorder

    def _request(self, header: dict[str, Any], arrays: list[np.ndarray],
                 limit: int) -> tuple[dict[str, Any], list[np.ndarray]]:
        rec = self.recorder
        rec.notes.clear()
        began = time.perf_counter()
        reply, received = super()._request(header, arrays, limit)
        ended = time.perf_counter()
        host_notes = [t for t, text in rec.notes if "running it" in text or "drawing" in text]
        done_notes = [t for t, text in rec.notes if "done, answering" in text]
        start = host_notes[0] if host_notes else began
        done = done_notes[-1] if done_notes else ended
        kinds = sorted({a.dtype.name for a in arrays if a.ndim})
        what = " ".join(f"{c['function']}@{c['precision'].removeprefix('float')}" for c in header.get("calls", ())) \
            or header.get("function") or header.get("name") or ""
        rec.calls.append({"phase": rec.phase, "call": f"{header['op']} {what}" + (f" [{'/'.join(kinds)}]" if kinds
                                                                                  else ""),
                          "sent": sum(a.nbytes for a in arrays), "received": sum(a.nbytes for a in received),
                          "wall": ended - began, "in": start - began, "host": done - start, "out": ended - done})
        return reply, received


def start(declaration: Any, backend: str, index: int, sandbox: bool, recorder: Recorder) -> tuple[Any, TimedCode]:
    from peak_mcp.runner.problem_hosts import start_host

    host, worker_end = start_host(declaration, backend, index, sandbox, memory_bytes=64 << 30)
    TimedCode.recorder = recorder
    code = TimedCode(worker_end, declaration, lambda: recorder.note)
    if code.broken or code.failed:
        host.kill()
        fail(f"the problem host did not start: {code.broken or code.failed}")
    return host, code


def one_round(problem: Any, sizes: dict[str, int], dtype: str, seed: int, rec: Recorder) -> None:
    from peak_mcp.evaluation import steps

    xp = rec.xp
    inputs = rec.run("inputs", lambda: problem.make_inputs(sizes, dtype, seed, xp))
    refs = rec.run("reference", lambda: steps._reference(xp, problem, inputs, sizes, dtype, seed,
                                                         spot_check=True))
    name = next(iter(refs))
    total = int(refs[name].values.size)
    picks = np.unique(np.random.default_rng(seed).integers(0, total, 32))
    picks = problem.host_picks(picks, sizes)
    to_host = getattr(xp, "asnumpy", np.asarray)
    rec.run("recheck reference_at", lambda: problem.reference_at(inputs, sizes, dtype, picks, to_host))


def table(rec: Recorder, label: str) -> None:
    mib = 2**20
    print(f"\n{label}")
    print(f"{'phase':<22}{'step':<44}{'n':>3}{'sent MiB':>10}{'recv MiB':>10}{'wall s':>9}{'in s':>8}{'host s':>8}"
          f"{'out s':>8}")
    for phase, wall in rec.phases.items():
        calls = [c for c in rec.calls if c["phase"] == phase]
        grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for c in calls:
            grouped[c["call"]].append(c)
        for call, group in grouped.items():
            s = {k: sum(c[k] for c in group) for k in ("sent", "received", "wall", "in", "host", "out")}
            print(f"{phase:<22}{call[:43]:<44}{len(group):>3}{s['sent'] / mib:>10.1f}{s['received'] / mib:>10.1f}"
                  f"{s['wall']:>9.3f}{s['in']:>8.3f}{s['host']:>8.3f}{s['out']:>8.3f}")
        for (p, step), (n, took) in rec.steps.items():
            if p == phase:
                print(f"{phase:<22}{'worker ' + step:<44}{n:>3}{'':>20}{took:>9.3f}")
        hosted = sum(c["wall"] for c in calls)
        print(f"{phase:<22}{'= phase (worker outside calls)':<44}{'':>23}{wall:>9.3f}   ({wall - hosted:.3f} s)")
    total = sum(rec.phases.values())
    calls = rec.calls
    print(f"{'all':<22}{'':<44}{len(calls):>3}{sum(c['sent'] for c in calls) / mib:>10.1f}"
          f"{sum(c['received'] for c in calls) / mib:>10.1f}{total:>9.3f}"
          f"{sum(c['in'] for c in calls):>8.3f}{sum(c['host'] for c in calls):>8.3f}"
          f"{sum(c['out'] for c in calls):>8.3f}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from peak_mcp.core.errors import PeakError
    from peak_mcp.problems.declared import DeclaredProblem
    from peak_mcp.problems.registry import describe_in_subprocess

    xp, backend, index = array_module(args.cpu)
    began = time.perf_counter()
    try:
        declaration = describe_in_subprocess(Path(args.problem).resolve(), sandbox=args.sandbox, timeout_s=600)
    except PeakError as exc:
        fail(f"{args.problem} does not describe: {exc.message}")
    problem = DeclaredProblem(declaration)
    try:
        sizes = problem.check_sizes(args.sizes)
    except PeakError as exc:
        fail(f"--sizes: {exc.message}")
    dtype = args.dtype or problem.dtypes[0]
    if dtype not in problem.dtypes:
        fail(f"--dtype {dtype} is not one of {list(problem.dtypes)}")
    print(f"{declaration.name}: sizes {sizes}, {dtype}, validator {xp.__name__}, host "
          f"{'GPU ' + str(index) if index >= 0 else 'CPU'}, described in {time.perf_counter() - began:.1f} s")
    rec = Recorder(xp)
    for owner, name, label in ((file_calls, "to_float64", "to_float64"),
                               (problem, "_checked_array", "_checked_array"),
                               (problem, "_chunked_bound", "_chunked_bound (the bound)")):
        rec.wrap(owner, name, label)
    host, code = start(declaration, backend, index, args.sandbox, rec)
    problem.code = code
    try:
        for round_ in range(args.repeat):
            rec.calls.clear()
            rec.steps.clear()
            rec.phases.clear()
            one_round(problem, sizes, dtype, args.seed + round_, rec)
            table(rec, f"round {round_ + 1}" + (" (the host's first: builds the model)" if round_ == 0 else
                                                " (fresh inputs, warm host)"))
    except PeakError as exc:
        print(f"the reference path failed: {exc.message}", file=sys.stderr)
        return 1
    finally:
        code.close()
        host.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
