"""Where the shipped data lives: inside the wheel (peak_mcp/_data) or at the top of a source checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent  # peak_mcp/, this module being peak_mcp/core/resources.py


def data_dir(name: str) -> Path:
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    return _PACKAGE.parent / name
