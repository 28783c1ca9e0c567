"""Benchmark through MCP: start a session, submit the example kernels, print the table (JSON to --out).

Runs a real MCP client against `python -m peak_mcp serve` over stdio, so what it measures includes the whole
server path: the round-trip wall time of each submit (compile + validate + benchmark) is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent


async def bench(backend: str, dtype: str, size: int, kernels: list[Path], data_dir: Path) -> dict:
    env = dict(os.environ)
    server = StdioServerParameters(command=sys.executable, args=["-m", "peak_mcp", "--data-dir", str(data_dir),
                                                                  "serve"], env=env)
    out: dict = {"backend": backend, "dtype": dtype, "size": size, "versions": []}
    async with Client(server, read_timeout_seconds=1800) as client:
        t0 = time.perf_counter()
        started = await client.call_tool("start_session", {"backend": backend, "dtype": dtype,
                                                           "sizes": {"M": size, "N": size, "K": size}})
        out["start_session_s"] = time.perf_counter() - t0
        if started.is_error:
            out["error"] = started.content[0].text
            return out
        session = started.structured_content
        out["session"] = {k: session[k] for k in ("session_id", "device", "baseline")}
        out["versions"].append({"kernel": "naive (v0)", **session["version_0"]})
        for path in kernels:
            t0 = time.perf_counter()
            result = await client.call_tool("submit_kernel", {"session_id": session["session_id"],
                                                              "source": path.read_text(), "parent": 0})
            wall = time.perf_counter() - t0
            report = result.structured_content or {"error": result.content[0].text}
            out["versions"].append({"kernel": path.name, "round_trip_s": wall, **report})
        history = await client.call_tool("history", {"session_id": session["session_id"]})
        out["table"] = history.content[0].text
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="cuda")
    parser.add_argument("--dtype", default="f32")
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/peak-bench"))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("kernels", type=Path, nargs="*")
    args = parser.parse_args()
    ext = {"cuda": "cu", "hlsl": "hlsl"}[args.backend]
    kernels = args.kernels or [p for p in sorted((ROOT / "examples" / "matmul" / args.backend).glob(f"*.{ext}"))
                               if p.stem != "naive"]
    result = anyio.run(bench, args.backend, args.dtype, args.size, kernels, args.data_dir)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1, default=str))
    print(result.get("table") or result.get("error"))
    nan = float("nan")
    for v in result["versions"]:
        perf = v.get("performance") or {}
        print(f"{v['kernel']:<24} {v.get('status')!s:<12} round trip {v.get('round_trip_s', 0):6.2f} s  "
              f"median {perf.get('median_ms', nan):9.4f} ms  {perf.get('tflops', nan):7.2f} TFLOP/s  "
              f"{perf.get('pct_of_vendor', nan):6.1f}% of vendor  {perf.get('pct_of_peak', nan):5.1f}% of peak")


if __name__ == "__main__":
    main()
