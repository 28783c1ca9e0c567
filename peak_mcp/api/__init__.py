"""The MCP surface: the server and its tools, the stdio and HTTP transports, HTTP limits, and what a client reads
(lean results, text summaries), plus the command line that wires it all. The only layer that imports `mcp`'s server."""
