"""An agent's Hopper session through MCP: two ladder steps written by an LLM agent from the catalog texts alone.

    python tools/agent_hopper_session.py --out /tmp/agent_out             # on an H100/H200: validate, time, tune
    python tools/agent_hopper_session.py --out /tmp/agent_out --no-tune   # compile-only machines: compile verdicts

Runs a real MCP client against `python -m peak_mcp serve` over stdio (as tools/tune_ladder.py does). Session: cuda,
bf16, M=N=K=4096. Version 0 is the naive kernel; then the shipped parent examples/matmul/cuda/bf16/hopper/wgmma_tma.cu
(hopper-tma-pipeline), then the agent's kernels under tests/data/agent_hopper/: ws.cu (hopper-warp-specialization,
parent: wgmma_tma.cu) and persistent.cu (hopper-persistent-gemm, parent: ws.cu), each submitted with its catalog id,
then each of the agent's versions tuned briefly, then the history. Every tool's answer is written, in call order, to
OUT/session.json (one file: the device tool returns at most 8).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters
from session_recorder import Recorder

ROOT = Path(__file__).resolve().parent.parent
PARENT = ROOT / "examples" / "matmul" / "cuda" / "bf16" / "hopper" / "wgmma_tma.cu"
AGENT = ROOT / "tests" / "data" / "agent_hopper"
STEPS = [("hopper-warp-specialization", "ws.cu"), ("hopper-persistent-gemm", "persistent.cu")]


async def session(args: argparse.Namespace) -> None:
    server = StdioServerParameters(command=sys.executable, args=["-m", "peak_mcp", "--data-dir", str(args.data_dir),
                                                                  "serve"], env=dict(os.environ))
    async with Client(server, read_timeout_seconds=1800) as client:
        call = Recorder(client, args.out, name="session.jsonl", lean=False, echo_chars=3000)
        started = await call("start_session", {"backend": "cuda", "dtype": "bf16",
                                               "sizes": {"M": 4096, "N": 4096, "K": 4096}, "label": "agent hopper"})
        sid = started["session_id"]
        await call("list_transformations", {"session_id": sid})
        for transformation, _ in STEPS:
            await call("get_transformation", {"transformation": transformation, "backend": "cuda",
                                              "device": started["device"].get("name") or "hopper"})
        parent = await call("submit_kernel", {"session_id": sid, "source": args.parent.read_text(), "parent": 0,
                                              "transformation": "hopper-tma-pipeline"})
        version = parent.get("version")
        mine = []
        for transformation, name in STEPS:
            await call("suggest_next", {"session_id": sid})
            await call("apply_transformation", {"session_id": sid, "transformation": transformation,
                                                "version": version})
            report = await call("submit_kernel", {"session_id": sid, "source": (args.kernels / name).read_text(),
                                                  "parent": version, "transformation": transformation})
            version = report.get("version")
            mine.append(version)
        if args.tune:
            for v in mine:
                await call("tune", {"session_id": sid, "version": v, "strategy": "exhaustive",
                                    "max_configs": args.max_configs, "budget_s": args.tune_budget})
                await call("get_version", {"session_id": sid, "version": v})
        await call("history", {"session_id": sid})
        await call("get_transformation_stats", {"session_id": sid})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/peak-agent-hopper"))
    parser.add_argument("--kernels", type=Path, default=AGENT, help="folder of the agent's ws.cu and persistent.cu")
    parser.add_argument("--parent", type=Path, default=PARENT, help="the hopper-tma-pipeline kernel to start from")
    parser.add_argument("--out", type=Path, default=None, help="folder for session.json")
    parser.add_argument("--no-tune", dest="tune", action="store_false", help="skip tune (compile-only machines)")
    parser.add_argument("--max-configs", type=int, default=6)
    parser.add_argument("--tune-budget", type=float, default=30.0, help="seconds each tune may search")
    anyio.run(session, parser.parse_args())
    return 0


if __name__ == "__main__":
    sys.exit(main())
