"""`peak-mcp experiment SPEC.json`: the plan run against the server (in-process, or `python -m peak_mcp serve` over
stdio), then its reports written beside the results and the Markdown table printed."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from pydantic import ValidationError

from peak_mcp.research import report
from peak_mcp.research.runner import ExperimentError, run_experiment, stdio_server
from peak_mcp.research.spec import ExperimentSpec


def experiment(spec_path: Path, out: Path | None, data_dir: Path | None,
               in_process: Callable[[], tuple[Any, Callable[[], None]]]) -> int:
    """in_process() -> (the MCP server to connect to, what closes it): api's command line builds it, since this
    layer sits below api and does not know how a server is wired."""
    try:
        spec = ExperimentSpec.read(spec_path)
    except (OSError, ValueError, ValidationError) as exc:
        print(f"peak-mcp: cannot read {spec_path}: {exc}", file=sys.stderr)
        return 2
    out = out or spec_path.with_suffix("")
    close: Callable[[], None] = lambda: None  # noqa: E731
    target = stdio_server(data_dir) if spec.server == "stdio" else None
    try:
        if target is None:
            target, close = in_process()
        cells = anyio.run(run_experiment, spec, out, target, lambda line: print(line, file=sys.stderr))
    except ExperimentError as exc:
        print(f"peak-mcp: {exc}", file=sys.stderr)
        return 1
    finally:
        close()
    paths = report.write(cells, out)
    print(paths["markdown"].read_text())
    print("\n".join(f"{kind}: {path}" for kind, path in paths.items() if path.exists()))
    return 0
