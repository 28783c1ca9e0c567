"""Backend lookup by name. Imports are lazy: a backend's libraries load only in the worker that uses it."""

from __future__ import annotations

import importlib
from typing import Any

from peak_mcp.backends.base import Executor

# backend name -> module exposing `probe() -> dict` and `open_executor(index: int | None, **options) -> Executor`
BACKEND_MODULES = {"cuda": "peak_mcp.backends.cuda", "hip": "peak_mcp.backends.hip",
                   "hlsl": "peak_mcp.backends.hlsl"}

# What the annotation line must carry, per backend.
ANNOTATION_KEYS = {"cuda": ("entry", "grid", "block"), "hip": ("entry", "grid", "block"), "hlsl": ("entry", "groups")}


def backend_module(name: str) -> Any:
    return importlib.import_module(BACKEND_MODULES[name])


def open_executor(name: str, index: int | None, **options: Any) -> Executor:
    """`index=None` opens a compile-only executor (no device needed)."""
    return backend_module(name).open_executor(index, **options)


def probe(name: str) -> dict[str, Any]:
    """{'backend', 'devices': [DeviceFacts as dict], 'compiler': {...}, 'missing': [{'what','why','fix'}]}."""
    try:
        return backend_module(name).probe()
    except Exception as exc:  # a broken install must not break doctor
        return {"backend": name, "devices": [], "compiler": {"available": False},
                "missing": [{"what": f"{name} backend", "why": f"{type(exc).__name__}: {exc}",
                             "fix": "reinstall peak-mcp with its dependencies: pip install -e ."}]}
