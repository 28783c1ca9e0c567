"""Shared fixtures: a real server wired to a temporary data directory, and device detection."""

from __future__ import annotations

import functools
import stat
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from peak_mcp.core.config import Settings
from peak_mcp.runner.probe import probe_all_in_subprocess

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "matmul"


@functools.cache
def probe() -> dict[str, Any]:
    return probe_all_in_subprocess()


def has_device(backend: str) -> bool:
    """A device that can run this backend's kernels: detected, and its compiler present (a GPU machine without
    glslang has a Vulkan device but cannot build a shader)."""
    found = probe().get(backend, {})
    return bool(found.get("devices")) and found.get("compiler", {}).get("available", True) is not False


def hip_platform() -> str:
    """Where HIP kernels run here: 'nvidia', 'amd', or '' without a HIP device."""
    devices = probe().get("hip", {}).get("devices") or [{}]
    return devices[0].get("properties", {}).get("platform", "")


def skip_reason(backend: str) -> str:
    missing = probe().get(backend, {}).get("missing", [])
    return "; ".join(f"{m['what']}: {m['why']}" for m in missing) or f"no {backend} device"


def hopper_marks() -> list[pytest.MarkDecorator]:
    """pytestmark of an async GPU test module that needs a Hopper GPU (wgmma, TMA and setmaxnreg need sm_90a)."""
    marks = [pytest.mark.gpu, pytest.mark.anyio]
    if not has_device("cuda"):
        return [*marks, pytest.mark.skip(reason=f"no CUDA GPU: {skip_reason('cuda')}")]
    cc = (probe()["cuda"]["devices"][0].get("properties") or {}).get("compute_capability", "")
    if not str(cc).startswith("9."):
        marks.append(pytest.mark.skip(reason=f"needs a Hopper GPU (compute capability 9.x); this one is {cc}"))
    return marks


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    s = Settings(data_dir=tmp_path / "data")
    s.benchmark_budget_s = 0.2
    return s


@pytest.fixture
def make_client(settings: Settings) -> Callable[..., Any]:
    """make_client(**client_kwargs) -> async context manager yielding (client, service)."""
    import contextlib

    @contextlib.asynccontextmanager
    async def factory(**kwargs: Any) -> AsyncIterator[tuple[Client, Any]]:
        from peak_mcp.api.app import build

        server, service = build(settings)
        try:
            async with Client(server, **kwargs) as client:
                yield client, service
        finally:
            service.close()

    return factory


def stand_in_python(tmp_path: Path, script: str) -> str:
    """A `python` for DevicePool that runs tests/<script> (a stand-in worker) with the worker's arguments: it drops
    the real worker's `-I -u -c <bootstrap>` and keeps the rest."""
    shim = tmp_path / "python"
    worker = Path(__file__).with_name(script)
    shim.write_text(f'#!/bin/sh\nshift 4\nexec "{sys.executable}" "{worker}" "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    return str(shim)


def step_of(result: Any) -> dict[str, Any]:
    """An apply_transformation answer's structured content; its brief is the one the text gives."""
    step = dict(result.structured_content)
    if step.get("brief"):
        assert result.content[0].text.split("\nbrief:\n", 1)[1] == step["brief"], "the text's brief is another"
    return step
