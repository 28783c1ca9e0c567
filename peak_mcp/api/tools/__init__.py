"""The MCP tools, in groups; `peak_mcp.api.server.create_server` registers them."""
