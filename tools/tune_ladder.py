"""A tuned ladder through MCP: each step a catalog transformation applied to the previous step (the sampled reply is
a shipped example kernel), then its tuning parameters searched with `tune`; TFLOP/s and % of the vendor library per
step, before and after tuning, and configurations per minute while tuning.

    python tools/tune_ladder.py --dtype f32 --size 4096 --out ladder_f32.json
    python tools/tune_ladder.py --dtype bf16 --size 4096 --out ladder_bf16.json
    python tools/tune_ladder.py --dtype f32 --hip-twin --out ladder_f32.json   # + the top step as HIP, same config
    python tools/tune_ladder.py --dtype f32 --size 8192 --from double-buffering  # the upper steps only
    python tools/tune_ladder.py --dtype bf16 --size 8192 --hopper --from hopper-tma-pipeline  # H100/H200 steps
    python tools/tune_ladder.py --backend hlsl --dtype f32 --size 4096   # HLSL on the device's Vulkan driver

Each step is applied with exact=true: the brief is the named text itself, not a device specialization of it (on an
H100, double-buffering would otherwise resolve to cuda-cp-async, the next step's text). --from STEP applies STEP to
the naive version 0 and skips the steps before it.

Like tools/bench_matmul.py it runs a real MCP client against `python -m peak_mcp serve` over stdio. --landscape FILE
also writes every configuration the first exhaustively tuned step measured (read back from the server's store) in
the table format tools/tune_strategies.py replays, to count how many configurations each strategy needs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from mcp import Client, StdioServerParameters

from peak_mcp.backends.hip_portability import hip_spelling
from peak_mcp.backends.registry import launch_spec
from peak_mcp.core.config import Settings
from peak_mcp.problems.matmul import Matmul
from peak_mcp.store.database import Store

ROOT = Path(__file__).resolve().parent.parent
CUDA = ROOT / "examples" / "matmul" / "cuda"
HLSL = ROOT / "examples" / "matmul" / "hlsl"
# (transformation, the kernel the sampled reply carries, strategy, max_configs)
LADDERS: dict[str, list[tuple[str, Path, str, int]]] = {
    "f32": [("shared-memory-tiling", CUDA / "smem_tiled.cu", "exhaustive", 8),
            ("register-blocking-2d", CUDA / "tuned" / "regblock.cu", "exhaustive", 256),
            ("double-buffering", CUDA / "double_buffered.cu", "none", 0),
            ("cuda-cp-async", CUDA / "tuned" / "cp_async.cu", "optuna", 64),
            ("warp-tiling", CUDA / "tuned" / "warptile_async.cu", "optuna", 64),
            ("three-xtf32", CUDA / "tuned" / "three_xtf32.cu", "optuna", 32)],
    "f16": [("tensor-cores", CUDA / "f16" / "wmma_tiled.cu", "none", 0),
            ("mma-sync-ptx", CUDA / "f16" / "mma_pipelined.cu", "exhaustive", 8)],
    "bf16": [("tensor-cores", CUDA / "bf16" / "wmma_tiled.cu", "none", 0),
             ("mma-sync-ptx", CUDA / "bf16" / "mma_pipelined.cu", "exhaustive", 8)],
    # HLSL (--backend hlsl): FP32 FMAs on every Vulkan device, so the yardstick is % of the FP32 peak
    "hlsl-f32": [("hlsl-groupshared-tiling", HLSL / "tiled_groupshared.hlsl", "none", 0),
                 ("register-blocking-2d", HLSL / "register_blocked.hlsl", "none", 0),
                 ("double-buffering", HLSL / "tuned" / "double_buffered.hlsl", "exhaustive", 8),
                 ("hlsl-wave-tiling", HLSL / "tuned" / "wave_tiled.hlsl", "exhaustive", 8),
                 ("tile-size-tuning", HLSL / "tuned" / "wide_tile.hlsl", "exhaustive", 8),
                 ("vectorized-loads", HLSL / "tuned" / "wide_vec.hlsl", "exhaustive", 8),
                 ("edge-tile-specialization", HLSL / "tuned" / "wide_edge.hlsl", "exhaustive", 2),
                 ("grid-rasterization", HLSL / "tuned" / "wide_raster.hlsl", "exhaustive", 8)],
}
# Hopper (sm_90a) steps for the 16-bit ladders, appended by --hopper: TMA + mbarrier pipeline, warp specialization,
# persistent grouped tiles, 2-CTA clusters with multicast. Their kernels include peak/hopper.cuh and take tensor
# maps, so they are CUDA-only (no HIP twin) and need a Hopper GPU.
HOPPER: dict[str, list[tuple[str, Path, str, int]]] = {
    dtype: [("hopper-tma-pipeline", CUDA / dtype / "hopper" / "wgmma_tma.cu", "exhaustive", 4),
            ("hopper-warp-specialization", CUDA / dtype / "hopper" / "wgmma_ws.cu", "exhaustive", 2),
            ("hopper-persistent-gemm", CUDA / dtype / "hopper" / "wgmma_persistent.cu", "exhaustive", 6),
            ("hopper-tma-multicast", CUDA / dtype / "hopper" / "wgmma_cluster.cu", "exhaustive", 12)]
    for dtype in ("f16", "bf16")}


class Replay:
    """Sampling callback: answers each request with the kernel of the step in progress."""

    def __init__(self, lang: str = "cuda") -> None:
        self.source = ""
        self.lang = lang

    async def __call__(self, context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        reply = f"```{self.lang}\n{self.source}```\n"
        return types.CreateMessageResult(role="assistant", model="replay",
                                         content=types.TextContent(type="text", text=reply))


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def _call(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    async def progress(value: float, total: float | None, message: str | None) -> None:
        if message:
            _log(f"    {tool}: {message}")

    result = await client.call_tool(tool, args, progress_callback=progress)
    if result.is_error:
        raise RuntimeError(f"{tool}({args.get('transformation') or args.get('version')}): {result.content[0].text}")
    return result.structured_content or {}


def _perf(report: dict[str, Any]) -> dict[str, Any]:
    perf = report.get("performance") or {}
    return {k: perf.get(k) for k in ("median_ms", "tflops", "pct_of_vendor", "pct_of_peak", "peak_tflops", "cv",
                                              "params") if k in perf}


def default_first(source: str, params: dict[str, int]) -> str:
    """The source with each parameter's value in `params` moved to the front of its list: submit_kernel then
    compiles exactly that configuration."""
    def reorder(match: re.Match[str]) -> str:
        name, values = match.group(1), [v.strip() for v in match.group(2).split(",")]
        if name in params:
            values = [str(params[name])] + [v for v in values if v != str(params[name])]
        return f"{name}=[{', '.join(values)}]"

    lines = [re.sub(r"(\w+)=\[([^\]]*)\]", reorder, line) if line.startswith("// peak: params") else line
             for line in source.splitlines()]
    return "\n".join(lines) + "\n"


async def ladder(args: argparse.Namespace) -> dict[str, Any]:
    server = StdioServerParameters(command=sys.executable, args=["-m", "peak_mcp", "--data-dir", str(args.data_dir),
                                                                  "serve"], env=dict(os.environ))
    replay = Replay(args.backend)
    sizes = {"M": args.size, "N": args.size, "K": args.size}
    out: dict[str, Any] = {"backend": args.backend, "dtype": args.dtype, "sizes": sizes, "from": args.start,
                           "steps": []}
    async with Client(server, read_timeout_seconds=3600, sampling_callback=replay) as client:
        session = await _call(client, "start_session", {"backend": args.backend, "dtype": args.dtype,
                                                          "sizes": sizes})
        sid = session["session_id"]
        out["device"] = session["device"].get("name")
        out["baseline"] = session.get("baseline")
        out["steps"].append({"step": "naive (version 0)", "version": 0, **_perf(session["version_0"])})
        _log(f"v0 {out['steps'][-1]}")
        parent = 0
        for transformation, path, strategy, max_configs in steps(ladder_key(args), args.start, args.hopper):
            replay.source = path.read_text()
            t0 = time.perf_counter()
            applied = await _call(client, "apply_transformation", {"session_id": sid, "transformation": transformation,
                                                                   "version": parent, "exact": True})
            version = applied.get("result")
            report = await _call(client, "get_version", {"session_id": sid, "version": version}) \
                if version is not None else {}
            report = report.get("report", report)
            step: dict[str, Any] = {"step": transformation, "kernel": str(path.relative_to(ROOT)), "version": version,
                                    "status": report.get("status"), "apply_s": round(time.perf_counter() - t0, 1),
                                    "default": _perf(report)}
            if report.get("status") != "benchmarked":
                step["message"] = report.get("message") or applied
                out["steps"].append(step)
                _log(f"{transformation}: not benchmarked: {str(step['message'])[:500]}")
                save(args.out, out)
                continue
            if strategy != "none":
                t0 = time.perf_counter()
                tuned = await _call(client, "tune", {"session_id": sid, "version": version, "strategy": strategy,
                                                     "max_configs": max_configs, "budget_s": args.tune_budget})
                wall = time.perf_counter() - t0
                final = (await _call(client, "get_version", {"session_id": sid, "version": version}))
                final = final.get("report", final)
                # configurations per minute of search: the full re-timing of the best afterwards is not search
                search_s = tuned.get("search_s") or wall
                step.update(tuned=_perf(final), tune={
                    "strategy": tuned.get("strategy"), "space": tuned.get("space_size"),
                    "valid": tuned.get("valid_size"), "tried": tuned.get("tried"),
                    "pruned": len(tuned.get("pruned") or []), "best": tuned.get("best"), "wall_s": round(wall, 1),
                    "search_s": round(search_s, 1), "stopped": tuned.get("stopped"),
                    "configs_per_min": round(60 * (tuned.get("tried") or 0) / search_s, 1),
                    "devices": tuned.get("devices"),
                    "top": [(r.get("params"), r.get("median_ms")) for r in (tuned.get("results") or [])[:5]]})
                if (final.get("performance") or {}).get("params") != (tuned.get("best") or {}).get("params"):
                    step["note"] = "the fastest configuration failed its full validation: " + str(tuned.get("stopped"))
            out["steps"].append(step)
            _log(f"{transformation}: {json.dumps({k: v for k, v in step.items() if k != 'top'})}")
            save(args.out, out)  # a step at a time: a run cut short by a timeout keeps what it measured
            parent = version
        if args.hip_twin:
            out["hip_twin"] = await hip_twin(client, out, sizes, args.dtype)
        history = await client.call_tool("history", {"session_id": sid})
        out["history"] = history.content[0].text
        out["session_id"] = sid
    return out


async def hip_twin(client: Client, out: dict[str, Any], sizes: dict[str, int], dtype: str) -> list[dict[str, Any]]:
    """The tuned steps' kernels at their best configuration, submitted to a CUDA session and to a HIP session (the
    same source with HIP's runtime header): the same kernel written in HIP, timed beside CUDA."""
    rows = []
    sessions = {}
    for backend in ("cuda", "hip"):
        sessions[backend] = (await _call(client, "start_session", {"backend": backend, "dtype": dtype,
                                                                   "sizes": sizes}))["session_id"]
    for step in out["steps"]:
        best = (step.get("tune") or {}).get("best")
        if not best:
            continue
        source = default_first((ROOT / step["kernel"]).read_text(), best["params"])
        row: dict[str, Any] = {"kernel": step["kernel"], "params": best["params"]}
        for backend, text in (("cuda", source), ("hip", hip_spelling(source))):
            report = await _call(client, "submit_kernel", {"session_id": sessions[backend], "source": text})
            row[backend] = {"status": report.get("status"), **_perf(report)}
            if report.get("status") != "benchmarked":
                row[backend]["message"] = str(report.get("message"))[:500]
        if row["cuda"].get("median_ms") and row["hip"].get("median_ms"):
            row["hip_vs_cuda_pct"] = round(100 * (row["hip"]["median_ms"] / row["cuda"]["median_ms"] - 1), 2)
        _log(f"hip twin: {row}")
        rows.append(row)
    return rows


def ladder_key(args: argparse.Namespace) -> str:
    return args.dtype if args.backend == "cuda" else f"{args.backend}-{args.dtype}"


def steps(key: str, start: str | None = None, hopper: bool = False) -> list[tuple[str, Path, str, int]]:
    """The ladder of `key` (a dtype, or backend-dtype), with the Hopper steps after it if `hopper`, from the step named
    `start` (applied to version 0) when given."""
    if hopper and key not in HOPPER:
        raise SystemExit(f"--hopper: the Hopper steps exist for CUDA {', '.join(HOPPER)}, not {key}")
    ladder = LADDERS[key] + (HOPPER[key] if hopper else [])
    if start is None:
        return ladder
    names = [step[0] for step in ladder]
    if start not in names:
        raise SystemExit(f"--from {start}: the {key} ladder's steps are {', '.join(names)}")
    return ladder[names.index(start):]


def save(path: Path | None, out: dict[str, Any]) -> None:
    if path:
        path.write_text(json.dumps(out, indent=1, default=str) + "\n")


def landscape(data_dir: Path, out: dict[str, Any]) -> dict[str, Any] | None:
    """Every configuration of the first exhaustively tuned step, from the server's store."""
    step = next((s for s in out["steps"] if (s.get("tune") or {}).get("strategy") == "exhaustive"
                 and (s["tune"].get("tried") or 0) >= 16), None)
    if step is None:
        return None
    store = Store(Settings(data_dir=data_dir).database)
    try:
        report = store.version(out["session_id"], step["version"]).tuning
    finally:
        store.close()
    if report is None:
        return None
    spec = launch_spec((ROOT / step["kernel"]).read_text(), out.get("backend", "cuda"), Matmul.symbols)
    table = [{"params": r.params, "ms": r.median_ms if r.status == "ok" else None, "status": r.status,
              "kind": r.kind} for r in report.results + report.pruned]
    return {"what": f"median ms of each configuration of {step['kernel']}, measured by the tune tool",
            "device": out.get("device"), "sizes": out["sizes"], "params": spec.params, "where": spec.where,
            "table": table}


def table(out: dict[str, Any]) -> list[str]:
    """One line a step: its time, TFLOP/s and share of the vendor library (tuned where tuned, with the default
    configuration's share beside it: the full timing of the search's best can come out below the default)."""
    lines = []
    for step in out["steps"]:
        tuned = step.get("tuned") or step.get("default") or step
        tune = step.get("tune") or {}
        default = (step.get("default") or {}).get("pct_of_vendor") if step.get("tuned") else None
        lines.append(f"{step['step']:<24} {tuned.get('median_ms')!s:>10} ms {tuned.get('tflops')!s:>8} TFLOP/s "
                     f"{tuned.get('pct_of_vendor')!s:>6} % of vendor"
                     + (f" (default {default} %)" if default is not None else "")
                     + (f" {tuned['pct_of_peak']:.1f} % of peak" if tuned.get("pct_of_peak") is not None else "")
                     + (f"  {tune['configs_per_min']} configs/min on devices {tune.get('devices')}"
                        if tune.get("configs_per_min") is not None else ""))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="cuda", choices=["cuda", "hlsl"])
    parser.add_argument("--dtype", default="f32", choices=sorted(k for k in LADDERS if "-" not in k))
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/peak-ladder"))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--hip-twin", action="store_true", help="also time the tuned kernels as HIP beside CUDA")
    parser.add_argument("--tune-budget", type=float, default=180.0, help="seconds each tune may search")
    parser.add_argument("--landscape", type=Path, default=None, help="write the exhaustive step's table here")
    parser.add_argument("--from", dest="start", default=None, metavar="STEP",
                        help="start at this step (applied to the naive version 0), skipping those before it")
    parser.add_argument("--hopper", action="store_true", help="append the Hopper (sm_90a) steps to a 16-bit ladder")
    args = parser.parse_args()
    if ladder_key(args) not in LADDERS:
        parser.error(f"no {args.backend} ladder for {args.dtype}")
    if args.hip_twin and args.backend != "cuda":
        parser.error("--hip-twin compares CUDA with HIP: it needs --backend cuda")
    steps(ladder_key(args), args.start, args.hopper)  # an unknown step stops here, before the server starts
    started = time.perf_counter()
    out = anyio.run(ladder, args)
    out["seconds"] = round(time.perf_counter() - started, 1)
    if args.landscape:
        measured = landscape(args.data_dir, out)  # not `table`: that name is the function printed below
        if measured:
            args.landscape.write_text(json.dumps(measured, indent=1) + "\n")
    save(args.out, out)
    print("\n".join(table(out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
