"""Backends, registered once: what the rest of the server needs to know of each (`BackendSpec`).

Imports are lazy: a backend's libraries load only in the worker that uses it (and in the probe subprocess).
Adding a backend means one `BackendSpec` here and a module exposing `probe() -> dict` and
`open_executor(index: int | None, **options) -> Executor`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from peak_mcp.backends.base import Executor
from peak_mcp.core.launch import LaunchSpec, parse_annotation


@dataclass(frozen=True)
class BackendSpec:
    name: str
    module: str  # exposes probe() and open_executor()
    extension: str  # of a kernel file: examples, exports
    annotation_keys: tuple[str, ...]  # what the `// peak:` line must carry
    language: str  # the fence tag of code in catalog texts
    compiles_without_device: bool  # compile-only sessions where no device exists
    vendor_library: str | None = None  # the yardstick timed beside the kernels, where there is one
    sanitizer: bool = False  # a sanitizer can watch its launches (compute-sanitizer; on Vulkan the validation layer)


BACKENDS: dict[str, BackendSpec] = {}


def register(spec: BackendSpec) -> BackendSpec:
    BACKENDS[spec.name] = spec
    return spec


register(BackendSpec("cuda", "peak_mcp.backends.cuda", ".cu", ("entry", "grid", "block"), "cuda",
                     compiles_without_device=True, vendor_library="cuBLAS", sanitizer=True))
# HIP runs on AMD (hip-python), on NVIDIA through a device header and NVRTC, and compiles offline for gfx targets.
register(BackendSpec("hip", "peak_mcp.backends.hip", ".hip", ("entry", "grid", "block"), "hip",
                     compiles_without_device=True, vendor_library="cuBLAS on NVIDIA", sanitizer=True))
register(BackendSpec("hlsl", "peak_mcp.backends.hlsl", ".hlsl", ("entry", "groups"), "hlsl",
                     compiles_without_device=True, sanitizer=True))


def backend_spec(name: str) -> BackendSpec:
    """The spec of `name`; KeyError for an unknown backend (callers turn it into an actionable error)."""
    return BACKENDS[name]


def launch_spec(source: str, backend: str, symbols: tuple[str, ...],
                derived: Mapping[str, str] | None = None) -> LaunchSpec:
    """The source's annotation, checked against what `backend` needs and the problem's size `symbols` (and its
    `derived` scalars, shorthand for their expressions)."""
    return parse_annotation(source, needs=BACKENDS[backend].annotation_keys, symbols=symbols, derived=derived)


def backend_module(name: str) -> Any:
    return importlib.import_module(BACKENDS[name].module)


def open_executor(name: str, index: int | None, **options: Any) -> Executor:
    """`index=None` opens a compile-only executor (no device needed)."""
    return backend_module(name).open_executor(index, **options)


def probe(name: str, **options: Any) -> dict[str, Any]:
    """{'backend', 'devices': [DeviceFacts as dict], 'compiler': {...}, 'missing': [{'what','why','fix'}]}."""
    try:
        return backend_module(name).probe(**options)
    except Exception as exc:  # a broken install must not break doctor
        return {"backend": name, "devices": [], "compiler": {"available": False},
                "missing": [{"what": f"{name} backend", "why": f"{type(exc).__name__}: {exc}",
                             "fix": "reinstall peak-mcp with its dependencies: pip install -e ."}]}
