"""The MCP surface: thin tools over the domain layer (service, applier, catalog), in groups under tools/.
No GPU code here."""

from __future__ import annotations

from typing import Any

from mcp.server import MCPServer

from peak_mcp import __version__
from peak_mcp.apply import Applier
from peak_mcp.catalog import Catalog
from peak_mcp.service import PeakService
from peak_mcp.tools import apply, catalog_tools, sessions

INSTRUCTIONS = """peak-mcp is a lab bench for GPU kernel optimization. Start with start_session (problem, backend,
dtype, sizes): version 0 is the naive kernel, validated and benchmarked, with the vendor library timed in the same
run. Then pick transformations (list_transformations / get_transformation) and apply them with
apply_transformation, or rewrite the kernel yourself and call submit_kernel. Every submission is compiled,
validated against a float64 reference and timed from a cold cache; history shows the sequence.
Reports name `head`, the version work continues from by default, and `best`, the fastest general version (right at
the session's sizes and at sampled other sizes); head may be slower. A version right only at the session's sizes is
`not_general`, no success.
A kernel is one source text with one `// peak:` annotation line giving the entry point and launch geometry."""


def create_server(service: PeakService, catalog: Catalog) -> MCPServer:
    applier = Applier(service, catalog)
    mcp = MCPServer("peak-mcp", instructions=INSTRUCTIONS, version=__version__)
    sessions.register(mcp, service, catalog, applier)
    catalog_tools.register(mcp, service, catalog, applier)
    apply.register(mcp, service, applier)
    _drop_titles(mcp)
    return mcp


def _drop_titles(mcp: MCPServer) -> None:
    """pydantic titles every property with its own name respelled ("session_id" -> "Session Id"): a fifth of
    tools/list for nothing. Schema keywords only: a property *named* title is a dict and stays. The SDK has no
    public hook for the registered schemas; without its tool manager this does nothing."""
    for tool in getattr(getattr(mcp, "_tool_manager", None), "_tools", {}).values():
        tool.parameters = _without_titles(tool.parameters)
        if tool.output_schema is not None:
            tool.output_schema = _without_titles(tool.output_schema)


def _without_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _without_titles(v) for k, v in schema.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(schema, list):
        return [_without_titles(v) for v in schema]
    return schema
