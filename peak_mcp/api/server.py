"""The MCP surface: thin tools over the domain layer (service, applier, catalog), in groups under tools/.
No GPU code here."""

from __future__ import annotations

import json
from typing import Any

from mcp.server import MCPServer

from peak_mcp import __version__
from peak_mcp.api.tools import apply, catalog_tools, sessions
from peak_mcp.api.tools.arguments import PeakServer
from peak_mcp.catalog.transformations import Catalog
from peak_mcp.loop.apply import Applier
from peak_mcp.loop.service import PeakService

INSTRUCTIONS = """peak-mcp is a lab bench for GPU kernel optimization. list_problems names the problems (matmul,
softmax, rmsnorm, ... and problem files: define_problem). Start with start_session (problem, backend, dtype, sizes):
version 0 is the naive kernel (or your own, reference_kernel), validated and benchmarked, with the yardsticks the
device has timed in the same run (the vendor library, the roofline, torch). Then pick transformations
(suggest_next, list_transformations / get_transformation) and apply them with apply_transformation, or rewrite the
kernel yourself and call submit_kernel. Every submission is compiled, validated against the problem's reference
(float64, or your reference kernel where the problem has no Python one) and timed from a cold cache; history shows
the sequence.
Reports name `head`, the version work continues from by default, and `best`, the fastest general version (right at
the session's sizes and at sampled other sizes); head may be slower. A version right only at the session's sizes is
`not_general`, no success.
A kernel is one source text with one `// peak:` annotation line giving the entry point and launch geometry.
Answers are JSON objects (structuredContent) with a text summary of the facts that matter (status, check, message,
times and their noise verdicts, head and best); a long part (a source, a diff, a compile log, a transformation's
text, an ABI, the session's rules) is in the JSON and, once, after the summary in the text: read either, not both.
The resource peak://output-schemas holds their schemas."""
OUTPUT_SCHEMAS = "peak://output-schemas"


def create_server(service: PeakService, catalog: Catalog) -> MCPServer:
    applier = Applier(service, catalog)
    mcp = PeakServer("peak-mcp", instructions=INSTRUCTIONS, version=__version__)
    sessions.register(mcp, service, catalog, applier)
    catalog_tools.register(mcp, service, catalog, applier)
    apply.register(mcp, service, applier)
    schemas = _lean_tool_list(mcp)

    @mcp.resource(OUTPUT_SCHEMAS, mime_type="application/json")
    def output_schemas() -> str:
        """The JSON schema of each tool's answer (structuredContent), by tool name."""
        return json.dumps(schemas, separators=(",", ":"))

    return mcp


def _lean_tool_list(mcp: MCPServer) -> dict[str, Any]:
    """Make tools/list lean (issue 20: 39,355 characters for 18 tools). pydantic titles every property with its
    own name respelled ("session_id" -> "Session Id") and spells each optional argument `anyOf [T, null]` with
    `default: null`; input schemas lose those and keep every name, type, enum, bound, default and description.
    Output schemas nested whole report models (5,000 characters for start_session alone) that LLM hosts do not
    show the model: tools/list leaves them out, the server still checks every answer against them, and the
    resource OUTPUT_SCHEMAS serves them. Returns them by tool name. The SDK has no public hook for the
    registered schemas; without its tool manager this does nothing."""
    schemas: dict[str, Any] = {}
    for tool in getattr(getattr(mcp, "_tool_manager", None), "_tools", {}).values():
        tool.description = " ".join((tool.description or "").split())  # a docstring's indentation, gone
        tool.parameters = compact_input(tool.parameters)
        if tool.output_schema is not None:
            schemas[tool.name] = _without_titles(tool.output_schema)
        tool.output_schema = None  # advertised only; fn_metadata still validates each answer
    return schemas


def compact_input(schema: dict[str, Any]) -> dict[str, Any]:
    """An argument schema without titles, null branches of optional arguments, or `additionalProperties: true`."""
    out = _without_titles(schema)
    required = set(out.get("required", ()))
    out["properties"] = {name: (prop if name in required else _optional(prop))
                         for name, prop in out.get("properties", {}).items()}
    return out


def _optional(prop: dict[str, Any]) -> dict[str, Any]:
    prop = {k: v for k, v in prop.items() if not (k == "default" and v is None)}
    branches = prop.pop("anyOf", None)
    if branches is not None:
        branches = [_no_open_object(b) for b in branches if b != {"type": "null"}]
        if len(branches) == 1:
            prop = {**branches[0], **prop}
        elif all(set(b) == {"type"} for b in branches):
            prop = {"type": [b["type"] for b in branches], **prop}
        else:
            prop["anyOf"] = branches
    return _no_open_object(prop)


def _no_open_object(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if not (k == "additionalProperties" and v is True)}


def _without_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _without_titles(v) for k, v in schema.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(schema, list):
        return [_without_titles(v) for v in schema]
    return schema
