"""The MCP tools, in groups; `peak_mcp.server.create_server` registers them."""
