"""Tuning over 1, 2, 4, ... GPUs through MCP (issue 35's curve): for each GPU count a fresh server that sees only
that many devices (CUDA_VISIBLE_DEVICES), a matmul session, the warp-tiled f32 kernel submitted, then `tune` with a
fixed strategy and configuration count: once cold (the server's first tune) and once warm (a second version). Prints
the wall time of each tune, configurations per minute, the speedup over one GPU, and where the seconds went (from
tune's progress lines: the search's batches, the re-timing of the fastest few, the full checks of the best). JSON of
every run to --out.

    python3 tools/bench_tune_scaling.py --gpus 1 2 4 --configs 96 --out $OUT/tune_scaling.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "examples" / "matmul" / "cuda" / "tuned" / "warptile.cu"
# progress lines that open each stage of a tune after its search (loop/tuning/tune.py)
STAGES = (("re-timing", "retime"), ("full validation", "full checks"), ("generality", "full checks"))


async def one(gpus: int, args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(str(i) for i in range(gpus)))
    data = tempfile.mkdtemp(prefix=f"peak-tune-{gpus}-")
    server = StdioServerParameters(command=sys.executable, args=["-m", "peak_mcp", "--data-dir", data, "serve"],
                                   env=env)
    out: dict[str, Any] = {"gpus": gpus}
    async with Client(server, read_timeout_seconds=1800) as client:
        started = await client.call_tool("start_session", {"problem": "matmul", "backend": "cuda", "dtype": "f32",
                                                           "sizes": {"M": args.size, "N": args.size, "K": args.size}})
        sid = started.structured_content["session_id"]
        # cold: the first tune of a fresh server (the other devices' workers start inside it); warm: a second
        # version's tune right after (its configurations differ: the random search is seeded by the version)
        for phase in ("cold", "warm"):
            submitted = await client.call_tool("submit_kernel", {"session_id": sid, "source": KERNEL.read_text()})
            out[phase] = await _tune(client, sid, submitted.structured_content["version"], args)
    return out


async def _tune(client: Client, sid: str, version: int, args: argparse.Namespace) -> dict[str, Any]:
    heard: list[tuple[float, str]] = []
    t0 = time.perf_counter()

    async def progress(done: float, total: float | None, message: str | None) -> None:
        heard.append((time.perf_counter() - t0, message or ""))

    tuned = await client.call_tool("tune", {"session_id": sid, "version": version, "strategy": args.strategy,
                                            "max_configs": args.configs}, progress_callback=progress)
    wall = time.perf_counter() - t0
    report = tuned.structured_content or {"error": tuned.content[0].text if tuned.content else "?"}
    search_end = max((t for t, m in heard if m.startswith("tuning:") and "configurations" in m), default=None)
    stages: dict[str, float] = {}
    for t, message in heard:
        for needle, stage in STAGES:
            if needle in message and stage not in stages:
                stages[stage] = round(t, 2)
    return {"wall_s": round(wall, 2), "search_end_s": search_end and round(search_end, 2), "stages_start_s": stages,
            "tried": report.get("tried"), "devices": report.get("devices"), "search_s": report.get("search_s"),
            "best": report.get("best"), "stopped": report.get("stopped"), "chosen_by": report.get("chosen_by"),
            "error": report.get("error"), "progress": [(round(t, 2), m) for t, m in heard]}


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for gpus in args.gpus:
        rows.append(await one(gpus, args))
        for phase in ("cold", "warm"):
            row, base = rows[-1][phase], rows[0][phase]
            rate = 60 * (row["tried"] or 0) / row["wall_s"]
            print(f"{gpus} GPU(s), {phase}: tune of {row['tried']} configurations in {row['wall_s']:.1f} s "
                  f"({rate:.0f}/min, {base['wall_s'] / row['wall_s']:.2f}x one GPU); search ended at "
                  f"{row['search_end_s']} s, then {row['stages_start_s']}; devices {row['devices']}"
                  + (f"; error: {row['error'][:300]}" if row.get("error") else ""), flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--configs", type=int, default=96)
    parser.add_argument("--strategy", default="random")
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = anyio.run(run, args)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
