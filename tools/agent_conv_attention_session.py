"""An agent's conv2d and attention sessions through MCP, with kernels an LLM agent wrote from the briefs alone.

    python tools/agent_conv_attention_session.py --out /tmp/agent23          # HLSL on lavapipe + CUDA compile-only

Runs a real MCP client against `python -m peak_mcp serve` over stdio (as tools/agent_hopper_session.py does) and
replays issue 23's agent session from the kernels under tests/data/agent23/kernels/ (written from list_problems'
ABI, the apply briefs and get_transformation's texts, never from examples/ or the builtin naive kernels):

- conv2d, hlsl f32, N=2 H=9 W=9 C=8 K=8 3x3 pad 1: a naive kernel, conv-implicit-gemm (through apply_transformation's
  brief), conv-gemm-smem-tiling (first with the `?:` that reads out of bounds in HLSL, then fixed), and a kernel
  that clamps the padding to the edge (wrong on purpose);
- conv2d, cuda f16, compile-only where there is no GPU: conv-implicit-gemm, conv-tensor-cores (wmma);
- attention, hlsl f32, B=1 H=2 S=64 D=32: a naive kernel, attention-online-tiling, one without the 1/sqrt(D) scale;
- attention_causal, hlsl f32, the same sizes: the naive and online kernels (CAUSAL=1), one that ignores the mask;
- attention_causal, cuda bf16 compile-only: attention-online-tiling, then profile.

Every answer is written, in call order, to OUT/session.jsonl (a call a line): the structured answer, and the
text where the structured one lacks it (apply_transformation's brief), sources shown by length. On a CPU Vulkan
device the two attention sessions' v0 (one thread per output element) take one to two minutes each to check.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from session_recorder import Recorder

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "tests" / "data" / "agent23" / "kernels"
CONV = {"N": 2, "H": 9, "W": 9, "C": 8, "K": 8, "R": 3, "S": 3, "STRIDE": 1, "PAD": 1, "DIL": 1}
ATTN = {"B": 1, "H": 2, "S": 64, "D": 32}  # B*H*S*D <= 65536: lavapipe's loop guard and fence timeout


def _src(name: str) -> str:
    return (KERNELS / name).read_text()


async def _submit(call: Recorder, sid: str, name: str, parent: int | None, transformation: str | None = None) -> int:
    args: dict[str, Any] = {"session_id": sid, "source": _src(name)}
    if parent is not None:
        args["parent"] = parent
    if transformation:
        args["transformation"] = transformation
    return (await call("submit_kernel", args)).get("version", -1)


async def conv_hlsl(call: Recorder) -> None:
    sid = (await call("start_session", {"problem": "conv2d", "backend": "hlsl", "dtype": "f32", "sizes": CONV,
                                        "label": "agent23 conv2d hlsl"}))["session_id"]
    await call("list_transformations", {"session_id": sid})
    naive = await _submit(call, sid, "conv2d_naive.hlsl", 0)
    await call("suggest_next", {"session_id": sid})
    await call("apply_transformation", {"session_id": sid, "transformation": "conv-implicit-gemm", "version": naive})
    igemm = await _submit(call, sid, "conv2d_igemm.hlsl", naive, "conv-implicit-gemm")
    await call("suggest_next", {"session_id": sid})
    await call("apply_transformation", {"session_id": sid, "transformation": "conv-gemm-smem-tiling",
                                        "version": igemm})
    await _submit(call, sid, "conv2d_smem_ternary_oob.hlsl", igemm, "conv-gemm-smem-tiling")
    await _submit(call, sid, "conv2d_smem.hlsl", igemm, "conv-gemm-smem-tiling")
    await _submit(call, sid, "conv2d_wrong_padding.hlsl", igemm)
    await call("history", {"session_id": sid})


async def conv_cuda(call: Recorder) -> None:
    sid = (await call("start_session", {"problem": "conv2d", "backend": "cuda", "dtype": "f16",
                                        "label": "agent23 conv2d cuda"}))["session_id"]
    await call("suggest_next", {"session_id": sid})
    await call("apply_transformation", {"session_id": sid, "transformation": "conv-implicit-gemm"})
    igemm = await _submit(call, sid, "conv2d_igemm.cu", 0, "conv-implicit-gemm")
    await call("get_transformation", {"transformation": "conv-tensor-cores", "backend": "cuda", "device": "sm_90a"})
    await _submit(call, sid, "conv2d_wmma.cu", igemm, "conv-tensor-cores")


async def attention_hlsl(call: Recorder, problem: str, wrong: str) -> None:
    sid = (await call("start_session", {"problem": problem, "backend": "hlsl", "dtype": "f32", "sizes": ATTN,
                                        "label": f"agent23 {problem} hlsl"}))["session_id"]
    await call("list_transformations", {"session_id": sid})
    await call("suggest_next", {"session_id": sid})
    naive = await _submit(call, sid, "attention_naive.hlsl", 0)
    await call("apply_transformation", {"session_id": sid, "transformation": "attention-online-tiling",
                                        "version": naive})
    online = await _submit(call, sid, "attention_online.hlsl", naive, "attention-online-tiling")
    await _submit(call, sid, wrong, online)
    await call("history", {"session_id": sid})


async def attention_cuda(call: Recorder) -> None:
    sid = (await call("start_session", {"problem": "attention_causal", "backend": "cuda", "dtype": "bf16",
                                        "label": "agent23 attention_causal cuda"}))["session_id"]
    await call("get_transformation", {"transformation": "attention-online-tiling", "backend": "cuda"})
    online = await _submit(call, sid, "attention_online.cu", 0, "attention-online-tiling")
    await call("profile", {"session_id": sid, "version": online})


async def session(args: argparse.Namespace) -> None:
    server = StdioServerParameters(command=sys.executable, args=["-m", "peak_mcp", "--data-dir", str(args.data_dir),
                                                                  "serve"], env=dict(os.environ))
    async with Client(server, read_timeout_seconds=1800) as client:
        call = Recorder(client, args.out)
        await call("list_problems", {})
        if "conv" in args.parts:
            await conv_hlsl(call)
            await conv_cuda(call)
        if "attention" in args.parts:
            await attention_hlsl(call, "attention", "attention_wrong_noscale.hlsl")
            await attention_hlsl(call, "attention_causal", "attention_causal_wrong_nomask.hlsl")
            await attention_cuda(call)
        await call("get_transformation_stats", {})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/peak-agent23"))
    parser.add_argument("--out", type=Path, default=None, help="folder for session.jsonl")
    parser.add_argument("--parts", nargs="+", default=["conv", "attention"], choices=["conv", "attention"])
    anyio.run(session, parser.parse_args())
    return 0


if __name__ == "__main__":
    sys.exit(main())
