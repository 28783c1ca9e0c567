"""Settings from command line and environment, with sensible defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from peak_mcp.catalog import catalog_dirs_from_env


def default_data_dir() -> Path:
    explicit = os.environ.get("PEAK_MCP_DATA_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "peak-mcp"


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


@dataclass
class Settings:
    data_dir: Path = field(default_factory=default_data_dir)
    extra_catalog_dirs: list[Path] = field(default_factory=list)
    # A job that sends no progress for this long is a hang: the worker is killed and restarted.
    inactivity_timeout_s: float = field(default_factory=lambda: _env_float("PEAK_MCP_JOB_TIMEOUT", 30.0))
    # A job that runs longer than this in all is stopped, progress or not (slow CPU devices at large sizes).
    job_total_timeout_s: float = field(default_factory=lambda: _env_float("PEAK_MCP_JOB_MAX_SECONDS", 900.0))
    validation_trials: int = 3
    # compute-sanitizer after generality on CUDA, where installed; PEAK_MCP_SANITIZER=0 turns it off.
    sanitizer: bool = field(default_factory=lambda: os.environ.get("PEAK_MCP_SANITIZER", "1").lower()
                            not in ("0", "off", "false", "no"))
    benchmark_budget_s: float = field(default_factory=lambda: _env_float("PEAK_MCP_BENCH_SECONDS", 1.0))
    default_max_attempts: int = 3

    @property
    def database(self) -> Path:
        return self.data_dir / "peak.sqlite3"

    @classmethod
    def from_env(cls, data_dir: Path | None = None) -> Settings:
        settings = cls()
        if data_dir is not None:
            settings.data_dir = data_dir
        settings.extra_catalog_dirs = catalog_dirs_from_env()
        return settings
