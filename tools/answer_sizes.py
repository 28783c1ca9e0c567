"""What an agent pays for the long answers (issue 34): bytes of list_problems, list_problems(problem=matmul),
list_transformations, get_transformation (the longest text), diff, get_version and start_session, as a real MCP
client receives them (in-process client; text blocks + structured content as compact JSON, UTF-8 bytes).

    python tools/answer_sizes.py [--kernelbench N] [--markdown]

The session is HLSL at 64x64x64 on the machine's Vulkan device (lavapipe here), else CUDA compile-only; its v1 is
v0's record with the second HLSL (or CUDA) matmul example as source, stored without a run, so that diff and
get_version have a real kernel to show. --kernelbench N also measures list_problems with the first N KernelBench
level-1 files (from the mirror) as a problem folder, the way `serve --problems DIR` reads them.
Run it from a checkout (PYTHONPATH=<checkout>) to measure that checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from mcp.client import Client

from peak_mcp.api.app import build
from peak_mcp.catalog.transformations import Catalog, builtin_transformations_dir
from peak_mcp.core.config import Settings

ROOT = Path(__file__).resolve().parent.parent
MIRROR = Path("/work/.mirror/ScalingIntelligence+KernelBench/repo")
SIZES = {"M": 64, "N": 64, "K": 64}


def size(result: Any) -> dict[str, int]:
    """One answer's UTF-8 bytes: its text blocks and its structured content as compact JSON."""
    text = sum(len((getattr(c, "text", "") or "").encode()) for c in result.content)
    structured = (len(json.dumps(result.structured_content, separators=(",", ":"), ensure_ascii=False).encode())
                  if result.structured_content is not None else 0)
    return {"text": text, "structured": structured, "total": text + structured}


def kernelbench_folder(count: int, folder: Path) -> Path:
    names = subprocess.run(["git", "-C", str(MIRROR), "ls-tree", "--name-only", "HEAD:KernelBench/level1"],
                           capture_output=True, text=True, check=True).stdout.split()
    for name in sorted(n for n in names if n.endswith(".py"))[:count]:
        source = subprocess.run(["git", "-C", str(MIRROR), "show", f"HEAD:KernelBench/level1/{name}"],
                                capture_output=True, text=True, check=True).stdout
        (folder / name).write_text(source)
    return folder


async def measure(data_dir: Path) -> dict[str, dict[str, int]]:
    server, service = build(Settings(data_dir=data_dir, benchmark_budget_s=0.2))
    out: dict[str, dict[str, int]] = {}
    try:
        async with Client(server) as client:
            async def call(label: str, name: str, args: dict[str, Any]) -> Any:
                result = await client.call_tool(name, args)
                assert not result.is_error, (name, result.content)
                out[label] = size(result)
                return result

            await call("list_problems", "list_problems", {})
            tools = {t.name: t for t in (await client.list_tools()).tools}
            if "problem" in tools["list_problems"].input_schema.get("properties", {}):
                await call("list_problems(problem=matmul)", "list_problems", {"problem": "matmul"})
            await call("list_transformations", "list_transformations", {})
            catalog = Catalog.load(builtin_transformations_dir())
            longest = max(catalog.list(), key=lambda t: len(t.body))
            await call(f"get_transformation ({longest.id})", "get_transformation", {"transformation": longest.id})
            backend = "hlsl" if service.probe().get("hlsl", {}).get("devices") else "cuda"
            started = await call(f"start_session ({backend} matmul)", "start_session",
                                 {"backend": backend, "sizes": SIZES})
            sid = started.structured_content["session_id"]
            ext = {"hlsl": "hlsl", "cuda": "cu"}[backend]
            example = sorted((ROOT / "examples" / "matmul" / backend).glob(f"*.{ext}"))[1]
            store = service.store
            v0 = store.versions(sid)[0]
            columns = v0.model_dump(mode="json", include={"status", "failure", "message", "compile", "validation",
                                                           "timing", "generality"})
            store.add_version(sid, parent=0, origin="submit", transformation=None, source=example.read_text(),
                              **columns)
            await call("diff v0 -> v1", "diff", {"session_id": sid, "a": 0, "b": 1})
            await call("get_version v1", "get_version", {"session_id": sid, "version": 1})
    finally:
        service.close()
    return out


async def measure_listing(problems: Path, data_dir: Path) -> dict[str, int]:
    server, service = build(Settings(data_dir=data_dir), problems=[problems])
    try:
        async with Client(server) as client:
            result = await client.call_tool("list_problems", {})
            listed = len((result.structured_content or {}).get("problems") or [])
            return {**size(result), "problems": listed}
    finally:
        service.close()


def markdown(sizes: dict[str, dict[str, int]]) -> str:
    rows = ["| answer | text B | structured B | total B |", "|---|---:|---:|---:|"]
    rows += [f"| {k} | {v['text']:,} | {v['structured']:,} | {v['total']:,} |" for k, v in sizes.items()]
    return "\n".join(rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernelbench", type=int, default=0, help="also list N KernelBench level-1 files")
    parser.add_argument("--markdown", action="store_true", help="a table instead of JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sizes = asyncio.run(measure(Path(tmp) / "data"))
        if args.kernelbench:
            folder = kernelbench_folder(args.kernelbench, Path(tempfile.mkdtemp(dir=tmp)))
            listing = asyncio.run(measure_listing(folder, Path(tmp) / "kb-data"))
            sizes[f"list_problems ({listing.pop('problems')} problems, {args.kernelbench} KernelBench files)"] \
                = listing
    print(markdown(sizes) if args.markdown else json.dumps(sizes, indent=1))
