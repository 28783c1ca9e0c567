"""Benchmark through MCP: start a session, submit the example kernels, print the table (JSON to --out).

Runs a real MCP client against `python -m peak_mcp serve` over stdio, so what it measures includes the whole
server path: the round-trip wall time of each submit (compile + validate + benchmark) is reported.

--faults also submits the kernels in examples/faults/ (a hang, an illegal address) and then a good kernel again, to
show the worker recovering. --apply ID=FILE runs apply_transformation(ID) from version 0 with a sampling callback
that answers with FILE: the sampled path end to end (prompt, reply parsing, compile, validate, benchmark), with a
human-written kernel standing in for the LLM's reply.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import anyio
import mcp.types as types
from mcp import Client, StdioServerParameters

from peak_mcp.api.demo import example_kernels

ROOT = Path(__file__).resolve().parent.parent


def replay(source: str, lang: str):
    """A sampling callback that answers every request with one kernel in a fenced block."""

    async def answer(context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        return types.CreateMessageResult(role="assistant", model="replay",
                                         content=types.TextContent(type="text", text=f"```{lang}\n{source}```\n"))

    return answer


async def bench(backend: str, dtype: str, size: int, kernels: list[Path], data_dir: Path, faults: list[Path],
                apply: tuple[str, Path] | None) -> dict:
    env = dict(os.environ)
    server = StdioServerParameters(command=sys.executable, args=["-m", "peak_mcp", "--data-dir", str(data_dir),
                                                                  "serve"], env=env)
    out: dict = {"backend": backend, "dtype": dtype, "size": size, "versions": []}
    callback = replay(apply[1].read_text(), backend) if apply else None
    async with Client(server, read_timeout_seconds=1800, sampling_callback=callback) as client:
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
        sid = session["session_id"]
        for path in faults + ([kernels[-1]] if faults and kernels else []):
            t0 = time.perf_counter()
            result = await client.call_tool("submit_kernel", {"session_id": sid, "source": path.read_text(),
                                                              "parent": 0})
            report = result.structured_content or {"error": result.content[0].text}
            out["versions"].append({"kernel": path.name, "round_trip_s": time.perf_counter() - t0, **report})
        if apply:
            t0 = time.perf_counter()
            result = await client.call_tool("apply_transformation", {"session_id": sid, "transformation": apply[0],
                                                                     "version": 0})
            step = result.structured_content or {"error": result.content[0].text}
            out["apply"] = {"transformation": apply[0], "reply_file": apply[1].name,
                            "round_trip_s": time.perf_counter() - t0, **step}
            if step.get("result"):
                out["versions"].append({"kernel": f"apply {apply[0]}", "round_trip_s": out["apply"]["round_trip_s"],
                                        **step["result"]})
        history = await client.call_tool("history", {"session_id": sid})
        out["table"] = history.content[0].text
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="cuda")
    parser.add_argument("--dtype", default="f32")
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/peak-bench"))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--faults", action="store_true", help="also submit examples/faults/ and recover")
    parser.add_argument("--apply", metavar="ID=FILE", default=None,
                        help="apply_transformation(ID) from v0, the sampling callback answering with FILE")
    parser.add_argument("kernels", type=Path, nargs="*")
    args = parser.parse_args()
    ext = {"cuda": "cu", "hlsl": "hlsl"}[args.backend]
    kernels = args.kernels or example_kernels(args.backend, args.dtype)
    faults = sorted((ROOT / "examples" / "faults").glob(f"*.{ext}")) if args.faults else []
    apply = None
    if args.apply:
        name, _, file = args.apply.partition("=")
        apply = (name, Path(file))
    result = anyio.run(bench, args.backend, args.dtype, args.size, kernels, args.data_dir, faults, apply)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1, default=str))
    print(result.get("table") or result.get("error"))
    nan = float("nan")
    for v in result["versions"]:
        perf, phases = v.get("performance") or {}, v.get("phases") or {}
        split = "/".join(f"{phases.get(p, nan):.2f}" for p in ("compile", "validate", "benchmark", "generality",
                                                                "sanitize"))
        general = (v.get("generality") or {}).get("passed")
        print(f"{v['kernel']:<30} {v.get('status')!s:<12} {v.get('failure') or '':<14} general={general!s:<5} "
              f"round trip {v.get('round_trip_s', 0):6.2f} s (compile/validate/benchmark/generality/sanitize "
              f"{split} s)  "
              f"median {perf.get('median_ms', nan):9.4f} ms  {perf.get('tflops', nan):7.3g} TFLOP/s  "
              f"{perf.get('pct_of_vendor', nan):6.1f}% of vendor  {perf.get('pct_of_peak', nan):5.1f}% of peak")


if __name__ == "__main__":
    main()
