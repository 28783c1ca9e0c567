"""What cuBLAS's f32 GEMM does that the catalog's warp-tiled kernel does not: time both, then profile both with ncu.

    python3 tools/sgemm_anatomy.py --sizes 4096 8192 --configs 24 --ncu --out $OUT/sgemm.json
    python3 tools/sgemm_anatomy.py --kernel examples/matmul/cuda/tuned/cp_async.cu --configs 12 ...

--kernel picks the f32 matmul kernel (default: the catalog's warptile_async.cu); its `// peak:` lines are read
before the GPU is touched.

1. A sample of the kernel's `// peak: params` space (the default first, then `--configs - 1` drawn with a fixed seed
   from the configurations every `where` admits, or the ones given with --config) is compiled with NVRTC through
   CuPy and timed at the first size with CUDA events (median of --reps launches, warm, no L2 flush: a 4096^3 GEMM
   reads 128 MB from an L2 of 50-60 MB many times over, so a flush changes nothing measurable); the fastest is
   checked against cuBLAS's product (relative error), then timed at every size.
2. cuBLAS (cupy.matmul, f32 with TF32 off: plain FMA, as the kernel) is timed the same way at every size.
3. With --ncu, the fastest configuration and cuBLAS run once each under Nsight Compute at the first size (this
   script again with --one), and the metrics that tell two FMA GEMMs apart are printed side by side: issue
   efficiency and stall reasons, the instruction mix (FFMA share, shared and global loads and stores, cp.async),
   shared-memory bank conflicts, L1 and L2 hit rates, registers, occupancy.

Needs python3 with cupy and numpy, and ncu for --ncu; no part of peak_mcp. The annotation reader is
tools/bench_rows.py's (imported from beside this file).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_rows  # the `// peak:` reader and NVRTC include paths

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "examples" / "matmul" / "cuda" / "tuned" / "warptile_async.cu"
# name in the table -> ncu metric; sums are per launch
METRICS = {
    "duration (us)": "gpu__time_duration.sum",
    "SM throughput % of peak": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "FMA pipe % of peak": "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "issue slots busy %": "sm__inst_issued.avg.pct_of_peak_sustained_active",
    "warps eligible per scheduler": "smsp__warps_eligible.avg.per_cycle_active",
    "instructions (M)": "smsp__inst_executed.sum",
    "FFMA thread-instructions (M)": "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "shared loads (M)": "smsp__sass_inst_executed_op_shared_ld.sum",
    "shared stores (M)": "smsp__sass_inst_executed_op_shared_st.sum",
    "global loads (M)": "smsp__sass_inst_executed_op_global_ld.sum",
    "cp.async (LDGSTS) (M)": "smsp__sass_inst_executed_op_ldgsts.sum",
    "shared load bank conflicts (M)": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "shared store bank conflicts (M)": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "L1 hit %": "l1tex__t_sector_hit_rate.pct",
    "L2 hit %": "lts__t_sector_hit_rate.pct",
    "DRAM read (MB)": "dram__bytes_read.sum",
    "registers per thread": "launch__registers_per_thread",
    "threads per block": "launch__block_size",
    "shared per block (KB)": "launch__shared_mem_per_block_dynamic",
    "achieved occupancy %": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "stall: long scoreboard": "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    "stall: short scoreboard (MIO)": "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
    "stall: MIO throttle": "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio",
    "stall: LG throttle": "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio",
    "stall: barrier": "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
    "stall: math pipe throttle": "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
    "stall: not selected": "smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio",
    "stall: selected": "smsp__average_warps_issue_stalled_selected_per_issue_active.ratio",
    "stall: wait": "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
    "stall: dispatch": "smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio",
    "stall: no instruction": "smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio",
}
SCALE = {"instructions (M)": 1e-6, "FFMA thread-instructions (M)": 1e-6, "shared loads (M)": 1e-6,
         "shared stores (M)": 1e-6, "global loads (M)": 1e-6, "cp.async (LDGSTS) (M)": 1e-6,
         "shared load bank conflicts (M)": 1e-6, "shared store bank conflicts (M)": 1e-6,
         "DRAM read (MB)": 1e-6, "shared per block (KB)": 1 / 1024, "duration (us)": 1e-3}


def sample_configs(spec: dict[str, Any], sizes: dict[str, int], count: int, seed: int) -> list[dict[str, int]]:
    """The default, then `count - 1` valid configurations drawn at random (rejection sampling over the space)."""
    names = list(spec["params"])
    default = {n: v[0] for n, v in spec["params"].items()}
    out, seen, rng = [default], {tuple(default.values())}, random.Random(seed)
    for _ in range(200_000):
        if len(out) >= count:
            break
        config = {n: rng.choice(spec["params"][n]) for n in names}
        key = tuple(config.values())
        if key in seen:
            continue
        seen.add(key)
        if all(bench_rows.evaluate(w, {**sizes, **config}) for w in spec["where"]):
            out.append(config)
    return out


class Gemm:
    """The kernel compiled per configuration, and cuBLAS, on square f32 problems."""

    def __init__(self, kernel: Path) -> None:
        import cupy as cp

        self.cp = cp
        self.source = kernel.read_text()
        self.spec = bench_rows.parse_annotation(self.source)
        self.includes = tuple(f"-I{d}" for d in bench_rows.include_dirs())
        self.data: dict[int, tuple[Any, Any, Any]] = {}
        major, minor = cp.cuda.Device().compute_capability[:1], cp.cuda.Device().compute_capability[1:]
        self.arch = f"sm_{major}{minor}"

    def operands(self, n: int) -> tuple[Any, Any, Any]:
        if n not in self.data:
            cp = self.cp
            rng = cp.random.RandomState(n)
            self.data = {n: (rng.uniform(-1, 1, (n, n), dtype=cp.float32), rng.uniform(-1, 1, (n, n), dtype=cp.float32),
                             cp.empty((n, n), dtype=cp.float32))}
        return self.data[n]

    def launcher(self, config: dict[str, int], n: int) -> Any:
        cp = self.cp
        source = bench_rows.kernel_source(self.source, "f32", config)
        module = cp.RawModule(code=source, options=("-std=c++17", f"-arch={self.arch}", *self.includes),
                              backend="nvrtc")
        kernel = module.get_function(self.spec["entry"])
        sizes = {"M": n, "N": n, "K": n}
        geo = bench_rows.geometry(self.spec, sizes, config)
        if geo["shared"] > 48 * 1024:
            kernel.max_dynamic_shared_size_bytes = geo["shared"]
        a, b, c = self.operands(n)
        args = (a, b, c, cp.int32(n), cp.int32(n), cp.int32(n))
        return lambda: kernel(geo["grid"], geo["block"], args, shared_mem=geo["shared"])

    def cublas(self, n: int) -> Any:
        a, b, c = self.operands(n)
        return lambda: self.cp.matmul(a, b, out=c)

    def time(self, launch: Any, reps: int) -> float:
        cp = self.cp
        for _ in range(3):
            launch()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        times = []
        for _ in range(reps):
            start.record()
            launch()
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end))
        return statistics.median(times)

    def error(self, config: dict[str, int], n: int) -> float:
        a, b, c = self.operands(n)
        c.fill(float("nan"))
        self.launcher(config, n)()
        ref = self.cp.matmul(a, b)
        return float(self.cp.abs(c - ref).max() / self.cp.abs(ref).max())


def tflops(n: int, ms: float) -> float:
    return 2 * n**3 / (ms * 1e-3) / 1e12


def run_one(which: str, n: int, kernel: Path) -> None:
    """Under ncu: one launch of the kernel at a configuration (JSON) or of cuBLAS."""
    gemm = Gemm(kernel)
    launch = gemm.cublas(n) if which == "cublas" else gemm.launcher(json.loads(which), n)
    launch()
    gemm.cp.cuda.Device().synchronize()


def profile(which: str, n: int, ncu: str, kernel: Path) -> dict[str, float]:
    """The metrics of the last kernel ncu saw in a --one run (cuBLAS may launch a helper first)."""
    command = [ncu, "--csv", "--page", "raw", "--metrics", ",".join(METRICS.values()),
               sys.executable, __file__, "--one", which, "--sizes", str(n), "--kernel", str(kernel)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    rows = [r for r in csv.reader(io.StringIO(done.stdout)) if r]
    header = next((r for r in rows if "Kernel Name" in r), None)
    if header is None:
        raise RuntimeError(f"ncu gave no table (rc {done.returncode}): {(done.stderr or done.stdout)[-600:]}")
    data = [r for r in rows[rows.index(header) + 1:] if len(r) == len(header) and r[0].isdigit()]
    last = dict(zip(header, data[-1], strict=True))
    out: dict[str, Any] = {"kernel": last.get("Kernel Name", "?")[:90]}
    for name, metric in METRICS.items():
        try:
            out[name] = float(last[metric].replace(",", "")) * SCALE.get(name, 1.0)
        except (KeyError, ValueError):
            out[name] = None
    return out


def _cell(value: Any) -> str:
    return value if isinstance(value, str) else ("n/a" if value is None else f"{value:,.2f}")


def _given_configs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[dict[str, int]]:
    """--config and --configs-from, each a JSON object of integer parameters; parser.error (exit 2) otherwise."""
    try:
        lines = args.config + (args.configs_from.read_text().splitlines() if args.configs_from else [])
    except OSError as exc:
        parser.error(f"--configs-from: {exc}")
    configs = []
    for line in (line for line in lines if line.strip()):
        try:
            config = json.loads(line)
        except json.JSONDecodeError as exc:
            parser.error(f"configuration {line[:80]!r} is not JSON: {exc.msg}")
        if not isinstance(config, dict) or not all(isinstance(k, str) and type(v) is int for k, v in config.items()):
            parser.error(f"configuration {line[:80]!r} is not an object of integer parameters, e.g. "
                         '\'{"BM": 128, "BN": 256}\'')
        configs.append(config)
    return configs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--configs", type=int, default=24, help="configurations timed at the first size")
    parser.add_argument("--config", action="append", default=[], help='a configuration to time, as JSON')
    parser.add_argument("--configs-from", type=Path, help="configurations to time, one JSON object a line")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=float, default=240.0, help="seconds for the configuration sample")
    parser.add_argument("--ncu", action="store_true")
    parser.add_argument("--kernel", type=Path, default=KERNEL, help="the f32 matmul kernel (.cu with `// peak:` lines)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "sgemm.json"))
    args = parser.parse_args()
    if min(args.sizes) < 1 or args.configs < 1 or args.reps < 1 or args.budget <= 0:
        parser.error("--sizes, --configs and --reps take positive integers, --budget positive seconds")
    kernel = args.kernel.resolve()
    try:
        bench_rows.parse_annotation(kernel.read_text())
    except (OSError, UnicodeDecodeError, ValueError, SyntaxError) as exc:
        parser.error(f"--kernel {args.kernel}: {exc}")
    if args.one:
        run_one(args.one, args.sizes[0], kernel)
        return 0
    given = _given_configs(parser, args)  # before the GPU is touched: a typo costs no device time

    gemm = Gemm(kernel)
    n0 = args.sizes[0]
    sizes = {"M": n0, "N": n0, "K": n0}
    candidates = given + sample_configs(gemm.spec, sizes, args.configs, args.seed)
    results: list[dict[str, Any]] = []
    started = time.monotonic()
    for config in candidates:
        if time.monotonic() - started > args.budget:
            print(f"budget spent after {len(results)} configurations", file=sys.stderr)
            break
        try:
            ms = gemm.time(gemm.launcher(config, n0), args.reps)
        except Exception as exc:  # a configuration that does not compile or launch is reported, not fatal
            print(f"{config}: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
            continue
        results.append({"config": config, "ms": ms, "tflops": tflops(n0, ms)})
        print(f"  {tflops(n0, ms):6.1f} TFLOP/s  {ms:.3f} ms  {config}", file=sys.stderr)
    if not results:
        print("no configuration ran", file=sys.stderr)
        return 1
    best = min(results, key=lambda r: r["ms"])
    report: dict[str, Any] = {"device": gemm.cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                              "kernel": str(kernel.relative_to(ROOT) if kernel.is_relative_to(ROOT) else kernel),
                              "best_config": best["config"],
                              "relative_error": gemm.error(best["config"], n0), "sample": results, "sizes": {}}
    print(f"# f32 GEMM on {report['device']}: {kernel.name} (best of {len(results)} configurations at {n0}) "
          f"against cuBLAS\n\nconfiguration: {best['config']}; max error / max |C| {report['relative_error']:.1e}\n")
    print("| size | kernel ms | kernel TFLOP/s | cuBLAS ms | cuBLAS TFLOP/s | kernel / cuBLAS |")
    print("|---|---|---|---|---|---|")
    for n in args.sizes:
        k_ms = gemm.time(gemm.launcher(best["config"], n), args.reps)
        c_ms = gemm.time(gemm.cublas(n), args.reps)
        report["sizes"][n] = {"kernel_ms": k_ms, "cublas_ms": c_ms}
        print(f"| {n}³ | {k_ms:.3f} | {tflops(n, k_ms):.1f} | {c_ms:.3f} | {tflops(n, c_ms):.1f} | "
              f"{100 * c_ms / k_ms:.1f}% |")
    ncu = shutil.which("ncu") or ("/usr/local/cuda/bin/ncu" if os.path.exists("/usr/local/cuda/bin/ncu") else None)
    if args.ncu and ncu:
        try:
            mine, theirs = profile(json.dumps(best["config"]), n0, ncu, kernel), profile("cublas", n0, ncu, kernel)
            report["ncu"] = {"kernel": mine, "cublas": theirs}
            print(f"\n## Nsight Compute at {n0}³, one launch each\n\n| metric | {kernel.stem} | cuBLAS |")
            print("|---|---|---|")
            for name in ["kernel", *METRICS]:
                a, b = mine.get(name), theirs.get(name)
                print(f"| {name} | {_cell(a)} | {_cell(b)} |")
        except Exception as exc:
            print(f"\nncu: {type(exc).__name__}: {exc}")
    Path(args.out).write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
