"""Benchmark the shipped kernels of the row problems (softmax, rmsnorm, row_sum) through MCP, as an agent would.

For each problem and dtype: start_session (version 0 is the problem's naive kernel), then submit the chosen examples
under examples/<problem>/<backend>/ (their one `typedef float T;` line set to the session's dtype), optionally tune
the last one, and print every version's status, median, GB/s and the report's yardstick figures (% of roofline,
x torch eager / torch.compile where the server times them). JSON of every report goes to --out.

    python3 tools/bench_problems.py --problems softmax rmsnorm --dtypes f32 bf16 --out $OUT/problems.json
    python3 tools/bench_problems.py --problems conv2d --dtypes f16 f32 --torch-kernels \
        --sizes N=32,H=56,W=56,C=64,K=64,R=3,S=3,STRIDE=1,PAD=1,DIL=1
    python3 tools/bench_problems.py --problems conv2d --dtypes f16 --v0 5_mma_swizzled \
        --kernels 6_hopper_tma_wgmma --sizes ...      (v0 is step 5, not the slow naive kernel)
    python3 tools/bench_problems.py --problem-dir DIR --problems kb_softmax --dtypes f32 \
        --sizes BATCH_SIZE=8192,DIM=8192 --kernels DIR/online.cu      (tools/gpu_suite.sh, part kernelbench)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from peak_mcp.problems.declared import C_TYPE

ROOT = Path(__file__).resolve().parent.parent
TYPES = {b: C_TYPE[b] for b in ("cuda", "hip")}  # each dtype's storage type, as the problems' preludes name it
LADDER = ["1_online_tiling", "2_tensor_cores", "3_cp_async_pipeline", "4_causal_skip", "5_hopper_wgmma",
          "6_warp_specialized"]
LADDER_OF = {"attention_causal": "attention"}  # problems that share one example ladder (the same ABI)
DEFAULT_KERNELS = {"attention": LADDER, "attention_causal": LADDER,
                   "softmax": ["2_warp_shuffle", "4_online_registers", "7_cache_hints", "8_fast_exp2"],
                   "rmsnorm": ["2_warp_shuffle", "4_registers", "7_cache_hints"],
                   "row_sum": ["2_warp_shuffle", "3_vectorized"],
                   "conv2d": ["1_implicit_gemm", "2_smem_tiled", "3_tensor_cores", "4_filter_specialized",
                              "5_mma_swizzled", "6_hopper_tma_wgmma"]}
ROW_PROBLEMS = {"softmax", "rmsnorm", "row_sum"}
SIXTEEN_BIT_ONLY = "static_assert(sizeof(T) == 2"  # a tensor-core step: not submitted to f32 sessions


def kernel_source(problem: str, backend: str, dtype: str, stem: str) -> str:
    folder = ROOT / "examples" / LADDER_OF.get(problem, problem) / backend
    path = Path(stem) if Path(stem).is_file() else next(folder.glob(f"{stem}.*"))
    text = path.read_text()
    if backend in TYPES:
        text = text.replace("typedef float T;", f"typedef {TYPES[backend][dtype]} T;", 1)
    return text


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], float]:
    started = time.perf_counter()
    result = await client.call_tool(tool, arguments)
    wall = time.perf_counter() - started
    if result.is_error:
        return {"error": result.content[0].text if result.content else "error"}, wall
    return result.structured_content or {"text": result.content[0].text}, wall


def line(name: str, report: dict[str, Any], wall: float) -> str:
    perf = report.get("performance") or {}
    extras = {k: v for k, v in perf.items() if any(t in k for t in ("roofline", "torch", "bandwidth", "vendor"))}
    if perf.get("x_torch_eager"):  # the torch yardstick's time over this version's: % of it
        extras["pct_of_torch_eager"] = round(100 * perf["x_torch_eager"], 1)
    general = (report.get("generality") or {}).get("passed")
    phases = " ".join(f"{k}={v:.1f}" for k, v in (report.get("phases") or {}).items() if isinstance(v, int | float))
    return (f"{name:<24} {report.get('status', report.get('error', '?'))!s:<12} {report.get('failure') or '':<16} "
            f"general={general!s:<5} median={perf.get('median_ms', float('nan')):.4g} ms "
            f"gbps={perf.get('gbps', float('nan')):.4g} {json.dumps(extras)} ({wall:.1f} s: {phases})")


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ, **({"PEAK_MCP_PROBLEMS": str(args.problem_dir)} if args.problem_dir else {}))
    server = StdioServerParameters(command=sys.executable, args=["-m", "peak_mcp", "--data-dir", args.data_dir,
                                                                  "serve"], env=env)
    out: dict[str, Any] = {"sessions": []}
    async with Client(server, read_timeout_seconds=1800) as client:
        for problem in args.problems:
            for dtype in args.dtypes:
                # --rows/--cols are the row problems' sizes; any other problem runs at its own default sizes
                sizes = args.sizes or ({"ROWS": args.rows, "COLS": args.cols} if problem in ROW_PROBLEMS else None)
                first_kernel = ({"reference_kernel": kernel_source(problem, args.backend, dtype, args.v0)}
                                if args.v0 and not args.submit_v0 else {})
                given = {"sizes": sizes} if sizes else {}
                started, wall = await call(client, "start_session", {"problem": problem, "backend": args.backend,
                                                                    "dtype": dtype, **given, **first_kernel})
                record: dict[str, Any] = {"problem": problem, "dtype": dtype, "start": started, "versions": []}
                out["sessions"].append(record)
                if "error" in started:
                    print(f"{problem} {dtype}: {started['error'][:400]}", flush=True)
                    continue
                sid = started["session_id"]
                v0 = started.get("version_0") or {}
                print(f"== {problem} {dtype} {sizes} on {started.get('device')}", flush=True)
                if args.torch_kernels:
                    record["torch_kernels"] = torch_kernels(problem, dtype, started.get("sizes") or sizes or {},
                                                            args.problem_dir)
                    print(f"torch_reference's CUDA kernels: {record['torch_kernels']}", flush=True)
                name = f"{args.v0 or 'naive'} (v0)"
                print(line(name, v0, wall) if v0 else "no naive kernel: the first submission is v0", flush=True)
                stems = DEFAULT_KERNELS.get(problem, []) if args.kernels is None else list(args.kernels)
                if args.submit_v0 and args.v0:
                    print(f"start_session: {wall:.1f} s; the agent writes each kernel for {args.think:g} s",
                          flush=True)
                    stems.insert(0, args.v0)
                for stem in stems:
                    await anyio.sleep(args.think)
                    source = kernel_source(problem, args.backend, dtype, stem)
                    if dtype == "f32" and SIXTEEN_BIT_ONLY in source:
                        print(f"{stem:<24} (f16 and bf16 only: not submitted)", flush=True)
                        continue
                    first = {"parent": 0} if v0 else {}  # a problem without a naive kernel starts empty
                    report, wall = await call(client, "submit_kernel", {
                        "session_id": sid, "source": source, **first})
                    record["versions"].append({"kernel": stem, "round_trip_s": wall, **report})
                    print(line(stem, report, wall), flush=True)
                if args.tune and record["versions"]:
                    last = record["versions"][-1].get("version")
                    tuned, wall = await call(client, "tune", {"session_id": sid, "version": last,
                                                              "max_configs": args.tune})
                    record["tune"] = tuned
                    best = (tuned.get("best") or {}) if isinstance(tuned.get("best"), dict) else {}
                    print(f"tune v{last}: {json.dumps(best)[:300]} ({wall:.1f} s)", flush=True)
                history, _ = await call(client, "history", {"session_id": sid})
                record["history"] = history
                text = await client.call_tool("history", {"session_id": sid})
                print(text.content[0].text if text.content else "", flush=True)
    return out


def torch_kernels(problem: str, dtype: str, sizes: dict[str, int], problem_dir: Path | None) -> list[str]:
    """The CUDA kernels torch_reference launches at these sizes, by time (torch.profiler): the vendor algorithm the
    torch yardstick is, by name (cuDNN's kernel names spell out its algorithm: implicit GEMM, Winograd, ...). Runs
    the problem file's code here, as a maintainer tool may."""
    import torch

    from peak_mcp.problems.loading import problem_code_allowed
    from peak_mcp.problems.registry import ProblemRegistry

    folders = [problem_dir] if problem_dir else []
    spec = ProblemRegistry(folders).get(problem)
    checked = spec.check_sizes(sizes)
    torch_dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    with problem_code_allowed():
        fn, keywords = spec.torch_reference(), spec.torch_keywords(checked)
        args = [torch.rand(arg.shape(checked), device="cuda", dtype=torch_dtype) * 2 - 1
                for arg in spec.arguments(dtype) if getattr(arg, "is_output", True) is False]
        for _ in range(3):  # cudnn.benchmark picks its algorithm on the first call
            fn(*args, **keywords)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                fn(*args, **keywords)
            torch.cuda.synchronize()
    events = sorted(prof.key_averages(), key=lambda e: -getattr(e, "device_time_total", 0))
    return [f"{e.key[:160]} ({getattr(e, 'device_time_total', 0) / max(1, e.count):.1f} us x{e.count // 5})"
            for e in events[:3] if getattr(e, "device_time_total", 0) > 0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cuda", choices=["cuda", "hip", "hlsl"])
    parser.add_argument("--problems", nargs="+", default=["softmax", "rmsnorm"])
    parser.add_argument("--dtypes", nargs="+", default=["f32", "bf16"])
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--cols", type=int, default=8192)
    parser.add_argument("--sizes", type=lambda t: {k: int(v) for k, v in (p.split("=") for p in t.split(","))},
                        default=None, help="e.g. BATCH_SIZE=8192,DIM=8192 (default: ROWS and COLS)")
    parser.add_argument("--problem-dir", type=Path, default=None, help="an operator problem folder (KernelBench files)")
    parser.add_argument("--kernels", nargs="*", default=None,
                        help="example stems or kernel files (default: the problem's ladder; a bare --kernels: "
                             "v0 alone)")
    parser.add_argument("--v0", default=None,
                        help="start each session with this example stem or file as version 0 (start_session's "
                             "reference_kernel) instead of the naive kernel, whose benchmark can take minutes")
    parser.add_argument("--submit-v0", action="store_true",
                        help="start the session without a kernel (a problem without a naive kernel then has no "
                             "version) and submit --v0 with submit_kernel, as an agent does, after --think seconds")
    parser.add_argument("--think", type=float, default=0.0,
                        help="seconds before each submission (an agent reading the last answer and writing its kernel)")
    parser.add_argument("--tune", type=int, default=0, help="tune the last kernel over up to N configurations")
    parser.add_argument("--torch-kernels", action="store_true",
                        help="name the CUDA kernels of each problem's torch yardstick (torch.profiler)")
    parser.add_argument("--data-dir", default="/tmp/peak-bench-problems")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    result = anyio.run(bench, args)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
