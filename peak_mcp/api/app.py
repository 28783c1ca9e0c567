"""Wiring: settings -> store, pool, catalog, service -> MCP server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import structlog
from mcp.server import MCPServer

from peak_mcp.api.server import create_server
from peak_mcp.catalog.transformations import Catalog, builtin_transformations_dir
from peak_mcp.core.config import Settings
from peak_mcp.core.logging import configure
from peak_mcp.loop.service import PeakService


def build(settings: Settings | None = None, data_dir: Path | None = None,
          ray: str | None = None, problems: list[Path] | None = None) -> tuple[MCPServer, PeakService]:
    settings = settings or Settings.from_env(data_dir)
    if ray is not None:  # --ray wins over PEAK_MCP_RAY
        settings.ray = ray
    if problems:  # --problems folders come before PEAK_MCP_PROBLEMS'
        settings.problem_dirs = [*problems, *settings.problem_dirs]
    if not structlog.is_configured():  # structlog's default prints to stdout, which a stdio server must not touch
        configure(settings.log_level)
    catalog = Catalog.load(builtin_transformations_dir(), settings.extra_catalog_dirs)
    service = PeakService(settings, **_on_ray(settings)) if settings.ray else PeakService(settings)
    return create_server(service, catalog), service


def _on_ray(settings: Settings) -> dict[str, Any]:
    """The pool and device probe of a Ray cluster: device workers as actors, the probe run where a GPU is."""
    from peak_mcp.backends.registry import BACKENDS
    from peak_mcp.runner.probe import probe_all_in_subprocess
    from peak_mcp.runner.ray_pool import RayDevicePool, cluster_probe, connect

    assert settings.ray is not None
    connect(settings.ray)
    options = {name: settings.probe_options(name) for name in BACKENDS}
    return {"pool": RayDevicePool(options=settings.worker_options),
            "probe": lambda: cluster_probe(lambda: probe_all_in_subprocess(options=options))}
