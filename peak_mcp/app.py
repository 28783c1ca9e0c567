"""Wiring: settings -> store, pool, catalog, service -> MCP server."""

from __future__ import annotations

from pathlib import Path

import structlog
from mcp.server import MCPServer

from peak_mcp.catalog import Catalog, builtin_transformations_dir
from peak_mcp.config import Settings
from peak_mcp.logging import configure
from peak_mcp.server import create_server
from peak_mcp.service import PeakService


def build(settings: Settings | None = None, data_dir: Path | None = None) -> tuple[MCPServer, PeakService]:
    settings = settings or Settings.from_env(data_dir)
    if not structlog.is_configured():  # structlog's default prints to stdout, which a stdio server must not touch
        configure(settings.log_level)
    catalog = Catalog.load(builtin_transformations_dir(), settings.extra_catalog_dirs)
    service = PeakService(settings)
    return create_server(service, catalog), service
