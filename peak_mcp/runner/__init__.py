"""Worker isolation: one long-lived process per device, driven over pipes by the MCP process."""
