"""What moving a problem file's code out of the device worker costs: submit round trips through MCP, the same kernel
on a shipped problem (its code runs in the worker, trusted) and on an operator's copy of it (its code runs in a
problem host of its own), in one server.

    python3 tools/problem_host_cost.py --backend cuda --problem softmax --kernel 4_online_registers \
        --sizes ROWS=8192,COLS=8192 --repeats 3 --out $OUT/host_cost.json

Run from another tree (PYTHONPATH=that tree) for a before: there the copy runs in the worker too.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent


async def _call(client: Client, tool: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], float]:
    started = time.perf_counter()
    result = await client.call_tool(tool, arguments)
    wall = time.perf_counter() - started
    if result.is_error:
        raise SystemExit(f"{tool} failed: {result.content[0].text if result.content else ''}")
    return result.structured_content or {}, wall


def copy_problem(problem: str, folder: Path) -> str:
    """The shipped problem file under another NAME in `folder` (an operator's file), with its naive kernels."""
    shipped = ROOT / "peak_mcp" / "problems" / "builtin"
    name = f"{problem}_operator"
    text = (shipped / f"{problem}.py").read_text()
    text = re.sub(r'^NAME = "[a-z0-9_]+"', f'NAME = "{name}"', text, count=1, flags=re.M)
    (folder / f"{name}.py").write_text(text)
    for sibling in shipped.iterdir():  # NAIVE files it names
        if sibling.suffix in (".cu", ".hip", ".hlsl") and sibling.stem.startswith(problem):
            (folder / sibling.name).write_text(sibling.read_text())
    return name


async def run(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="peak-host-cost-"))
    copy = copy_problem(args.problem, folder)
    server = StdioServerParameters(command=sys.executable, args=["-m", "peak_mcp", "serve", "--data-dir",
                                                                 args.data_dir, "--problems", str(folder)],
                                   env=dict(os.environ))  # PYTHONPATH, where the packages are (the GPU machine)
    ext = {"cuda": "cu", "hip": "hip", "hlsl": "hlsl"}[args.backend]
    source = next((ROOT / "examples" / args.problem / args.backend).glob(f"{args.kernel}.{ext}")).read_text()
    out: dict[str, Any] = {}
    async with Client(server) as client:
        for name in (args.problem, copy):
            session, start_s = await _call(client, "start_session", {"problem": name, "backend": args.backend,
                                                                      "dtype": args.dtype, "sizes": args.sizes})
            walls, phases = [], []
            for _ in range(args.repeats):
                report, wall = await _call(client, "submit_kernel", {"session_id": session["session_id"],
                                                                    "source": source})
                walls.append(wall)
                phases.append(report.get("phases"))
                status = report.get("status")
            out[name] = {"start_session_s": round(start_s, 2), "submit_s": [round(w, 2) for w in walls],
                         "median_s": round(statistics.median(walls), 2), "status": status, "phases": phases[-1]}
            print(f"{name}: start_session {start_s:.2f} s; submit {', '.join(f'{w:.2f}' for w in walls)} s "
                  f"({status}); phases {phases[-1]}", flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cuda", choices=["cuda", "hip", "hlsl"])
    parser.add_argument("--problem", default="softmax")
    parser.add_argument("--kernel", default="4_online_registers")
    parser.add_argument("--dtype", default="f32")
    parser.add_argument("--sizes", type=lambda t: {k: int(v) for k, v in (p.split("=") for p in t.split(","))},
                        default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", default=tempfile.mkdtemp(prefix="peak-host-cost-data-"))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    result = anyio.run(run, args)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
