"""peak-mcp: an MCP server for GPU kernel optimization by natural-language transformations."""

__version__ = "0.1.0"
