"""`peak-mcp demo`: the loop end to end through a real MCP client talking to `peak-mcp serve` over stdio."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from peak_mcp.resources import data_dir
from peak_mcp.service import CPU_DEVICE_SIZES  # the service picks these itself; the demo prints them up front

EXAMPLES = data_dir("examples") / "matmul"  # shipped in the wheel as peak_mcp/_data/examples


def demo_sizes(device: dict[str, Any] | None, sizes: dict[str, int] | None) -> dict[str, int] | None:
    """The sizes asked for; else 1024^3 on a CPU device; else None (the problem's default)."""
    if sizes is None and device is not None and device.get("device_type") == "cpu":
        return dict(CPU_DEVICE_SIZES)
    return sizes


def example_kernels(backend: str, dtype: str) -> list[Path]:
    """The hand-written examples for a backend and dtype: f32 ones at the top of examples/matmul/<backend>/,
    others in a folder named after their dtype (a kernel's pointer types fix its dtype). Naive is version 0."""
    folder = EXAMPLES / backend if dtype == "f32" else EXAMPLES / backend / dtype
    return sorted(p for p in folder.glob("*") if p.is_file() and p.stem != "naive")


async def _demo(backend: str | None, dtype: str, sizes: dict[str, int] | None, kernels: list[Path] | None,
                data_dir: Path | None) -> int:
    args = ["-m", "peak_mcp"] + (["--data-dir", str(data_dir)] if data_dir else []) + ["serve"]
    server = StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))

    async def progress(value: float, total: float | None, message: str | None) -> None:
        print(f"  … {message}", file=sys.stderr)

    async with Client(server, read_timeout_seconds=1800) as client:
        doctor = (await client.call_tool("doctor", {})).structured_content or {}
        runnable = [b["backend"] for b in doctor.get("backends", []) if b.get("can_run")]
        usable = [b["backend"] for b in doctor.get("backends", []) if b.get("usable")]
        backend = backend or (runnable or usable or ["cuda"])[0]
        print(f"backends that can run here: {runnable or 'none'}; using {backend}")
        devices = next((b["devices"] for b in doctor.get("backends", []) if b["backend"] == backend), [])
        chosen = demo_sizes(devices[0] if devices else None, sizes)
        if chosen is not sizes:
            print(f"{devices[0].get('name')} is a CPU device: sizes {chosen} (--sizes overrides)")
        sizes = chosen
        started = await client.call_tool("start_session", {"backend": backend, "dtype": dtype, "sizes": sizes},
                                         progress_callback=progress)
        if started.is_error:
            print(started.content[0].text, file=sys.stderr)
            return 1
        session = started.structured_content
        print(f"session {session['session_id']} on {session['device'].get('name')}: v0 "
              f"{session['version_0']['status']} — {session['version_0']['message']}")
        files = kernels if kernels is not None else example_kernels(backend, dtype)
        if not files:
            print(f"no example kernels for {backend} {dtype}; version 0 is the naive kernel")
        made = {0: "the naive kernel"}  # version -> kernel file
        for path in files:
            t0 = time.perf_counter()
            result = await client.call_tool("submit_kernel", {"session_id": session["session_id"],
                                                              "source": path.read_text(), "parent": 0},
                                            progress_callback=progress)
            wall = time.perf_counter() - t0
            report: dict[str, Any] = result.structured_content or {}
            if "version" in report:
                made[report["version"]] = path.name
            perf = report.get("performance") or {}
            print(f"{path.name}: v{report.get('version')} {report.get('status')} in {wall:.2f} s round trip; "
                  f"{json.dumps({k: round(v, 4) for k, v in perf.items() if isinstance(v, float)})}"
                  + (f"; {report['note']}" if report.get("note") else "")
                  if not result.is_error else f"{path.name}: {result.content[0].text}")
        history = await client.call_tool("history", {"session_id": session["session_id"]})
        print(history.content[0].text)
        found = history.structured_content or {}
        print(best_line(found, made))
        if found.get("best") is not None and found.get("best") != found.get("head"):  # leave the session on its best
            await client.call_tool("revert", {"session_id": session["session_id"], "version": found["best"]})
            print(f"head moved to the best version, v{found['best']} (revert)")
        where = f" --data-dir {data_dir}" if data_dir else ""
        print(f"chart and table: peak-mcp{where} show {session['session_id']} --out chart.png")
    return 0


def best_line(history: dict[str, Any], made: dict[int, str]) -> str:
    """Which version is best (the fastest general one), which kernel it is, and how it compares with v0."""
    best = history.get("best")
    if best is None:
        return "best: none (no general version was timed here)"
    row = next(r for r in history["rows"] if r["version"] == best)
    name = made.get(best, "?")
    speed = f", {row['speedup_vs_v0']:.2f}× v0" if row.get("speedup_vs_v0") else ""
    return f"best: v{best} ({name}), {row['median_ms']:.4g} ms{speed}; head: v{history.get('head')}"


def run_demo(backend: str | None, dtype: str, sizes: dict[str, int] | None, kernels: list[Path] | None,
             data_dir: Path | None) -> int:
    return anyio.run(_demo, backend, dtype, sizes, kernels, data_dir)
