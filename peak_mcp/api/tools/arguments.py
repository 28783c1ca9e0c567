"""Argument mistakes answered in words: an unknown name is told the expected names and the closest one, a
missing one is named with what it is, and a wrong value reads `name: what is wrong` without pydantic's input echo
and documentation URL."""

from __future__ import annotations

import difflib
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import ValidationError

# Names callers reach for from other APIs, mapped to this server's: difflib finds typos, not synonyms.
SYNONYMS = {"code": "source", "kernel": "source", "src": "source", "session": "session_id", "id": "session_id",
            "sid": "session_id", "version_id": "version", "v": "version", "size": "sizes", "shape": "sizes"}


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_").replace("-", "_")


def closest(name: str, expected: list[str]) -> str | None:
    """The expected argument a caller most likely meant by `name`: sessionId -> session_id, code -> source."""
    for guess in (name, _snake(name), name.lower()):
        if guess in expected:
            return guess
        if SYNONYMS.get(guess) in expected:
            return SYNONYMS[guess]
    found = difflib.get_close_matches(_snake(name), expected, n=1, cutoff=0.6)
    return found[0] if found else None


def argument_problems(tool: str, schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """What is wrong with the argument names, in words, or None."""
    properties = schema.get("properties", {})
    expected, required = list(properties), list(schema.get("required", []))
    missing = [n for n in required if n not in arguments]
    unknown = [n for n in arguments if n not in properties]
    if not unknown and not missing:
        return None
    problems = []
    for name in unknown:
        guess = closest(name, expected)
        problems.append(f"unknown argument {name!r}" + (f" (did you mean {guess!r}?)" if guess else ""))
        if guess in missing:
            missing.remove(guess)
    for name in missing:
        what = properties.get(name, {}).get("description")
        problems.append(f"missing required argument {name!r}" + (f" ({what})" if what else ""))
    names = [f"{n} (required)" if n in required else n for n in expected]
    return f"{tool}: {'; '.join(problems)}.\n{tool} takes: {', '.join(names) or 'no arguments'}."


def readable(tool: str, exc: ValidationError) -> str:
    """pydantic's errors as `argument: message` lines."""
    lines = []
    for err in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        lines.append(f"{where}: {err['msg']}")
    return f"{tool}: invalid arguments\n" + "\n".join(lines)


class PeakServer(MCPServer):
    """MCPServer whose tools check argument names first and say in words what is wrong."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None) -> Any:
        tool = self._tool_manager.get_tool(name)
        if tool is not None and isinstance(arguments, dict):
            problem = argument_problems(name, tool.parameters, arguments)
            if problem:
                raise ToolError(problem)
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(readable(name, exc.__cause__)) from exc.__cause__
            raise
