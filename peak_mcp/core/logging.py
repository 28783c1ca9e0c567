"""structlog to stderr: stdout belongs to the MCP stdio transport."""

from __future__ import annotations

import logging
import os
import sys

import structlog


def configure(level: str | None = None) -> None:
    level_name = (level or os.environ.get("PEAK_MCP_LOG_LEVEL", "INFO")).upper()
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, level_name, logging.INFO), format="%(message)s")
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso"),
                    structlog.dev.ConsoleRenderer(colors=False)],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level_name, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
    )
