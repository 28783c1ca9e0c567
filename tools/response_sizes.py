"""How much an agent reads: the size of `tools/list` and of a typical session's responses, through a real
in-process MCP client (HLSL on the machine's Vulkan device, or CUDA compile-only when there is none).

    python tools/response_sizes.py [--data-dir DIR]

Prints one JSON object: characters per call (text content + structured content, as a client receives them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from mcp.client import Client

from peak_mcp.app import build
from peak_mcp.config import Settings

ROOT = Path(__file__).resolve().parent.parent
SIZES = {"M": 128, "N": 128, "K": 128}


def _size(result: Any) -> int:
    text = sum(len(getattr(c, "text", "") or "") + len(getattr(c, "data", "") or "") for c in result.content)
    structured = len(json.dumps(result.structured_content)) if result.structured_content is not None else 0
    return text + structured


async def main(data_dir: Path) -> dict[str, Any]:
    server, service = build(Settings(data_dir=data_dir, benchmark_budget_s=0.2))
    sizes: dict[str, int] = {}
    try:
        async with Client(server) as client:
            tools = await client.list_tools()
            sizes["tools/list"] = len(json.dumps([t.model_dump(mode="json", exclude_none=True) for t in tools.tools]))
            backend = "hlsl" if service.probe().get("hlsl", {}).get("devices") else "cuda"
            ext = {"hlsl": "hlsl", "cuda": "cu"}[backend]
            examples = sorted((ROOT / "examples" / "matmul" / backend).glob(f"*.{ext}"))[:2]

            async def call(name: str, args: dict[str, Any]) -> Any:
                result = await client.call_tool(name, args)
                sizes[name] = sizes.get(name, 0) + _size(result)
                return result

            started = await call("start_session", {"backend": backend, "sizes": SIZES})
            sid = started.structured_content["session_id"]
            for path in examples:
                await call("submit_kernel", {"session_id": sid, "source": path.read_text()})
            await call("list_sessions", {})
            await call("history", {"session_id": sid})
            await call("get_version", {"session_id": sid, "version": 1})
            await call("diff", {"session_id": sid, "a": 0, "b": 1})
            await call("list_transformations", {"backend": backend})
            await call("get_transformation", {"id": "shared-memory-tiling", "backend": backend})
            await call("doctor", {})
    finally:
        service.close()
    sizes["session total"] = sum(v for k, v in sizes.items() if k != "tools/list")
    return {"backend": backend, "chars": sizes}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(asyncio.run(main(args.data_dir or Path(tmp))), indent=1))
