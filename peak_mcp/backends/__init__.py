"""Backends. Each runs inside a worker process; the MCP process only ever compiles through a worker too."""
