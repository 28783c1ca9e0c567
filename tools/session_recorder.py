"""Recorder: an MCP client's tool calls kept in call order, for the scripted agent sessions
(tools/agent_hopper_session.py, tools/agent_conv_attention_session.py) whose transcripts are read afterwards."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from mcp import Client


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Recorder:
    """Calls tools and keeps every answer: the structured one, and the text where the structured one is not all
    (`lean`: only then; otherwise always). Saved after each call to `out`/`name` as JSON lines."""

    def __init__(self, client: Client, out: Path | None, *, name: str = "session.jsonl", lean: bool = True,
                 echo_chars: int = 0) -> None:
        self.client, self.out, self.name, self.lean, self.echo_chars = client, out, name, lean, echo_chars
        self.calls: list[dict[str, Any]] = []

    async def __call__(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        result = await self.client.call_tool(tool, args)
        text = "\n".join(getattr(c, "text", "") for c in result.content)
        structured = result.structured_content
        entry: dict[str, Any] = {
            "tool": tool, "args": {k: (v if k != "source" else f"<{len(v)} chars>") for k, v in args.items()},
            "wall_s": round(time.perf_counter() - t0, 2), "is_error": result.is_error, "structured": structured}
        if not self.lean or structured is None or tool == "apply_transformation":  # its brief is in the text
            entry["text"] = text
        self.calls.append(entry)
        status = structured.get("status") if isinstance(structured, dict) else None
        log(f"== {tool} {entry['args']} ({entry['wall_s']} s){' ERROR' if result.is_error else ''}"
            f"{' ' + status if status else ''}" + (f"\n{text[:self.echo_chars]}" if self.echo_chars else ""))
        self.save()
        return structured or {}

    def save(self) -> None:
        if self.out:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / self.name).write_text("".join(
                json.dumps(c, ensure_ascii=False, separators=(",", ":"), default=str) + "\n" for c in self.calls))
