"""How much an agent reads: the size of `tools/list` and of a typical session's responses, through a real
in-process MCP client (HLSL on the machine's Vulkan device, or CUDA compile-only when there is none).

    python tools/response_sizes.py [--data-dir DIR] [--history N]

Prints one JSON object: characters per call (text content + structured content as compact JSON, as a client
receives them), and
`history (N versions, chart)`: one history call with chart=true once the session holds N versions. The versions past
the ones submitted are copies of the submitted versions' stored records (timings, checks, sources), each the child
of the one before, so that the size of a long session's history is measured without N runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from mcp.client import Client

from peak_mcp.api.app import build
from peak_mcp.core.config import Settings

ROOT = Path(__file__).resolve().parent.parent
SIZES = {"M": 128, "N": 128, "K": 128}


def _compact(value: Any) -> int:
    """Characters of `value` as JSON goes over the wire (compact, no spaces after separators)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False)) if value is not None else 0


def _size(result: Any) -> int:
    text = sum(len(getattr(c, "text", "") or "") + len(getattr(c, "data", "") or "") for c in result.content)
    return text + _compact(result.structured_content)


def _parts(result: Any) -> dict[str, int]:
    """One answer's characters by part: text blocks, image data (base64), structured content."""
    return {"text": sum(len(getattr(c, "text", "") or "") for c in result.content),
            "image": sum(len(getattr(c, "data", "") or "") for c in result.content),
            "structured": _compact(result.structured_content)}


def _grow(service: Any, sid: str, versions: int) -> None:
    """Copies of the session's submitted versions until it holds `versions`, each the child of the one before."""
    store = service.store
    stored = [v for v in store.versions(sid) if v.number > 0]
    last = store.versions(sid)[-1].number
    while len(store.versions(sid)) < versions:
        model = stored[last % len(stored)]
        columns = model.model_dump(mode="json", include={"status", "failure", "message", "compile", "validation",
                                                          "timing", "generality"})
        last = store.add_version(sid, parent=last, origin="submit", transformation="shared-memory-tiling",
                                 source=model.source, **columns)
    store.set_head(sid, last)


async def main(data_dir: Path, history: int = 50) -> dict[str, Any]:
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
            await call("get_transformation", {"transformation": "shared-memory-tiling", "backend": backend})
            await call("list_problems", {})
            await call("apply_transformation", {"session_id": sid, "transformation": "shared-memory-tiling"})
            await call("doctor", {})
            _grow(service, sid, history)
            long = await client.call_tool("history", {"session_id": sid, "chart": True})
            sizes[f"history ({history} versions, chart)"] = _size(long)
            parts = _parts(long)
    finally:
        service.close()
    sizes["session total"] = sum(v for k, v in sizes.items() if k != "tools/list" and not k.startswith("history ("))
    return {"backend": backend, "chars": sizes, f"history ({history} versions, chart) by part": parts}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--history", type=int, default=50, help="versions the long history is measured at")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(asyncio.run(main(args.data_dir or Path(tmp), args.history)), indent=1))
