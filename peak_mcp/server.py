"""The MCP surface: thin tools over the domain layer (service, applier, catalog), in groups under tools/.
No GPU code here."""

from __future__ import annotations

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
A kernel is one source text with one `// peak:` annotation line giving the entry point and launch geometry."""


def create_server(service: PeakService, catalog: Catalog) -> MCPServer:
    applier = Applier(service, catalog)
    mcp = MCPServer("peak-mcp", instructions=INSTRUCTIONS, version=__version__)
    sessions.register(mcp, service, catalog, applier)
    catalog_tools.register(mcp, service, catalog, applier)
    apply.register(mcp, service, applier)
    return mcp
