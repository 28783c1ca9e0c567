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

from peak_mcp.core.resources import data_dir
from peak_mcp.store.records import Status

EXAMPLES = data_dir("examples") / "matmul"  # shipped in the wheel as peak_mcp/_data/examples
# The demo's sizes on a CPU Vulkan device (lavapipe): the whole demo (v0 and the shipped kernels, validated and
# timed) took 17.2 s wall at 256^3 on 2 cores (22.2 s beside two busy loops), against 3 min 37 s at the service's
# CPU default of 1024^3, where a loaded machine ran into the job limits. `--sizes` overrides.
DEMO_CPU_SIZES = {"M": 256, "N": 256, "K": 256}


def demo_sizes(device: dict[str, Any] | None, sizes: dict[str, int] | None) -> dict[str, int] | None:
    """The sizes asked for; else DEMO_CPU_SIZES on a CPU device; else None (the problem's default)."""
    if sizes is None and device is not None and device.get("device_type") == "cpu":
        return dict(DEMO_CPU_SIZES)
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
        failures = [] if _usable(session["version_0"].get("status")) else [
            ("v0 (the naive kernel)", session["version_0"].get("status"), session["version_0"].get("failure"))]
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
            if result.is_error or not _usable(report.get("status")):
                failures.append((path.name, report.get("status", "error"), report.get("failure")))
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
    if failures:
        print(failure_summary(failures, sizes), file=sys.stderr)
        return 1
    return 0


def _usable(status: str | None) -> bool:
    """Passed here, or compiled where nothing can run (a compile-only device)."""
    return status is not None and status in Status.__members__.values() and Status(status).usable


def failure_summary(failures: list[tuple[str, str | None, str | None]], sizes: dict[str, int] | None) -> str:
    """Which kernels did not pass, and for timeouts what to change: the shipped kernels pass on a working device,
    so a timeout there says the machine was too slow or too busy for these sizes."""
    lines = [f"demo: {len(failures)} kernel(s) did not pass: " + "; ".join(
        f"{name}: {status}" + (f" ({failure})" if failure else "") for name, status, failure in failures)]
    if any(failure == "timeout" for _, _, failure in failures):
        at = ",".join(f"{k}={v}" for k, v in (sizes or {}).items()) or "the problem's default sizes"
        lines.append(f"a timeout at {at} is a job limit, not a broken kernel: on a slow or busy machine pass "
                     "smaller --sizes (e.g. --sizes M=128,N=128,K=128) or raise PEAK_MCP_JOB_TIMEOUT and "
                     "PEAK_MCP_VK_FENCE_TIMEOUT_S (seconds).")
    return "\n".join(lines)


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
