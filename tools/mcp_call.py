"""One MCP tool call over streamable HTTP, printed as an LLM client would see it: for a helper playing the agent
against a running `peak-mcp serve --http`, one call at a time.

    python tools/mcp_call.py [--url URL] TOOL '{"arg": ...}'      # or the arguments on stdin as JSON
    python tools/mcp_call.py --list                               # the tools and their input schemas

The text of the answer goes to stdout; `--structured` adds the structured answer as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from mcp import Client


async def _main(args: argparse.Namespace) -> int:
    async with Client(args.url, read_timeout_seconds=args.timeout) as client:
        if args.list:
            for tool in (await client.list_tools()).tools:
                print(f"## {tool.name}\n{tool.description}\n{json.dumps(tool.input_schema)}\n")
            return 0
        raw = args.arguments if args.arguments is not None else sys.stdin.read()
        result = await client.call_tool(args.tool, json.loads(raw or "{}"))
        for block in result.content:
            print(getattr(block, "text", f"<{block.type} content>"))
        if args.structured and result.structured_content is not None:
            print("\n--- structured ---\n" + json.dumps(result.structured_content, indent=1))
        return 1 if result.is_error else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tool", nargs="?")
    parser.add_argument("arguments", nargs="?", default=None, help="the arguments as a JSON object")
    parser.add_argument("--url", default="http://127.0.0.1:8765/mcp")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--structured", action="store_true")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    if not args.list and not args.tool:
        parser.error("name a tool, or --list")
    sys.exit(asyncio.run(_main(args)))


if __name__ == "__main__":
    main()
