"""The loop tells the truth: what an LLM agent that drove a real session found misleading, each through an MCP
client. Timings that must be exact come from stand-in workers (tests/stand_in_worker.py poses as an H100 whose
timings a `// TIMES` line sets; tests/stand_in_devices.py tunes); the CPU yardstick is timed on lavapipe for real.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mcp import Client

from peak_mcp.api.server import create_server
from peak_mcp.backends import cpu_baseline
from peak_mcp.catalog.transformations import Catalog, builtin_transformations_dir
from peak_mcp.core.config import Settings
from peak_mcp.loop.service import PeakService
from peak_mcp.runner.pool import DevicePool
from tests.conftest import has_device, probe, stand_in_python, step_of
from tests.test_fanout import TUNED

pytestmark = pytest.mark.anyio
H100 = {"backend": "cuda", "index": 0, "name": "NVIDIA H100 80GB HBM3",
        "properties": {"compute_capability": "9.0", "sm_count": 132}}
CUDA_GPU = {"cuda": {"backend": "cuda", "devices": [H100], "compiler": {"available": True}, "missing": []}}
TILING = "shared-memory-tiling"


def _cpu_vulkan() -> bool:
    return has_device("hlsl") and probe()["hlsl"]["devices"][0].get("properties", {}).get("device_type") == "cpu"


def lavapipe(test: Any) -> Any:
    """A test that times on a CPU Vulkan device (lavapipe): the yardstick there is the CPU's BLAS."""
    return pytest.mark.vulkan(pytest.mark.skipif(not _cpu_vulkan(), reason="needs a CPU Vulkan device (lavapipe)")(
        test))


@contextlib.asynccontextmanager
async def _served(tmp_path: Path, worker: str, probed: dict[str, Any],
                  options: Any = None) -> AsyncIterator[tuple[Client, PeakService]]:
    """An MCP client on a real server whose device workers are the stand-in `worker`."""
    settings = Settings(data_dir=tmp_path / "data")
    pool = DevicePool(python=stand_in_python(tmp_path, worker), lock_dir=settings.data_dir / "locks", options=options)
    service = PeakService(settings, pool=pool, probe=lambda: probed)
    try:
        async with Client(create_server(service, Catalog.load(builtin_transformations_dir(), []))) as client:
            yield client, service
    finally:
        service.close()


async def _call(client: Client, tool: str, args: dict[str, Any]) -> Any:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return result


# --- 1 and 2: the CPU yardstick, warm and steady, like for like; a kernel above it is flagged ----------------------

def test_a_busy_second_at_the_start_does_not_become_the_yardstick(monkeypatch) -> None:
    """On a shared CPU a multi-threaded BLAS call waits out a scheduler slice whenever one of its threads is
    descheduled: a session's start read 16 ms for a product that takes 0.027 ms. Here the first 0.6 s of calls take
    16 ms each (a busy machine, or a cold process): the yardstick is the quietest round, and says the rounds
    disagreed."""
    started = time.perf_counter()
    real = cpu_baseline._gemm

    def busy_at_first(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
        if time.perf_counter() - started < 0.6:
            time.sleep(0.016)
        real(a, b, c)

    monkeypatch.setattr(cpu_baseline, "_gemm", busy_at_first)
    rng = np.random.default_rng(0)
    inputs = {"A": rng.random(64 * 64, np.float32), "B": rng.random(64 * 64, np.float32)}
    found = cpu_baseline.time_numpy_matmul("f32", {"M": 64, "N": 64, "K": 64}, inputs, 0.3, flush_bytes=1 << 16)
    assert found["rounds_ms"][0] > 10, found["rounds_ms"]  # the busy round was timed, and kept in the record
    assert found["median_ms"] < 1 and found["median_ms"] == min(found["rounds_ms"]), found
    assert found["cold_cache"] is True and "disagreed" in found["note"]


@lavapipe
async def test_the_cpu_yardstick_is_timed_like_the_kernels_and_says_how(make_client) -> None:
    async with make_client() as (client, _):
        info = (await _call(client, "start_session", {"backend": "hlsl", "sizes": {"M": 64, "N": 64, "K": 64}})
                ).structured_content
        baseline = info["baseline"]
        assert baseline["cold_cache"] is True and len(baseline["rounds_ms"]) >= 3, baseline
        assert baseline["median_ms"] == min(baseline["rounds_ms"]) and "quietest" in baseline["note"]
        timed = info["version_0"]["performance"]["timed"]
        assert timed.startswith("kernel cold-cache median of ") and "; vendor cold-cache median of " in timed
        assert timed.endswith(": like for like"), timed


@lavapipe
async def test_a_kernel_faster_than_the_yardstick_is_flagged_plainly(make_client) -> None:
    """The agent's session: a yardstick timed at 16 ms (warm, on a busy CPU) put a 0.78 ms kernel at 2,053% of the
    vendor, silently. Every report that shows the percentage now says what it is."""
    async with make_client() as (client, service):
        sid = (await _call(client, "start_session", {"backend": "hlsl", "sizes": {"M": 32, "N": 32, "K": 32}})
               ).structured_content["session_id"]
        slow = {"available": True, "library": "numpy (OpenBLAS) f32 matmul on the same CPU", "median_ms": 16.0,
                "p25_ms": 15.9, "p75_ms": 16.1, "reps": 61, "cold_cache": False}  # as an earlier release stored it
        service.store.set_baseline(sid, slow)
        detail = (await _call(client, "get_version", {"session_id": sid, "version": 0}))
        perf = detail.structured_content["report"]["performance"]
        assert perf["pct_of_vendor"] > 100
        assert re.match(r"faster than the vendor yardstick \(\d+% of it\): rare", perf["vendor_flag"]), perf
        assert "re-time both with benchmark" in perf["vendor_flag"]
        assert perf["timed"].endswith("vendor warm-cache median of 61 calls: not like for like (one from a cold "
                                      "cache, one warm)"), perf["timed"]
        assert "FLAG: faster than the vendor yardstick" in detail.content[0].text
        history = await _call(client, "history", {"session_id": sid})
        assert history.structured_content["rows"][0]["above_vendor"] is True
        assert " (!) |" in history.content[0].text and "(!) faster than the vendor yardstick" in history.content[0].text
        step = step_of(await _call(client, "apply_transformation", {"session_id": sid, "transformation": TILING})
                       )  # this client cannot sample: the brief comes back
        assert "% of its speed, faster than the yardstick: rare, so suspect the yardstick" in step["brief"]


# --- 3: speedups judged against the noise of both timings ---------------------------------------------------------

async def test_speedups_within_noise_are_no_gain_and_a_slowdown_is_no_success(tmp_path: Path) -> None:
    """v0 times 10 ms (cv 0.01). A child at 9.8 ms whose middle half is 9.6-10.1 ms is within noise, not a 1.02×
    gain; one at 16.7 ms is the agent's 0.60× step, which get_transformation_stats counted as a success."""
    async with _served(tmp_path, "stand_in_worker.py", CUDA_GPU) as (client, service):
        sid = (await _call(client, "start_session", {"backend": "cuda", "sizes": {"M": 64, "N": 64, "K": 64}})
               ).structured_content["session_id"]
        naive = service.store.version(sid, 0).source

        async def child(times: str) -> Any:
            return await _call(client, "submit_kernel", {"session_id": sid, "parent": 0, "transformation": TILING,
                                                         "source": f"{naive}// TIMES {times}\n"})

        level = await child("median=9.8 p25=9.6 p75=10.1")
        perf = level.structured_content["performance"]
        assert (perf["speedup_vs_parent"], perf["change_vs_parent"]) == (1.02, "within noise"), perf
        assert "(1.02× its parent v0: within noise)" in level.structured_content["note"]
        assert level.structured_content["note"].endswith("; the fastest general version, by a margin within noise "
                                                         "of v0 (10 ms)"), level.structured_content["note"]
        assert "1.02× its parent (within noise)" in level.content[0].text

        faster = (await child("median=6.0 p25=5.9 p75=6.1")).structured_content
        assert faster["performance"]["change_vs_parent"] == "faster beyond noise"
        slower = await child("median=16.7 p25=16.5 p75=16.9")
        perf = slower.structured_content["performance"]
        assert (perf["speedup_vs_parent"], perf["change_vs_parent"]) == (0.5988, "slower beyond noise")
        note = slower.structured_content["note"]
        # read slower than v0's record, v0 was timed again right after it (10 ms again): still a slowdown
        assert note.startswith("head → v3 (0.60× its parent v0: a slowdown beyond noise, v0 re-timed back to "
                               "back); best: v2 (6 ms), head is 0.36× as fast (slower beyond noise)"), note
        assert note.endswith("to build on the best, submit with parent=2 (or revert to it)"), note

        stats = (await _call(client, "get_transformation_stats", {})).structured_content["transformations"]
        [tiling] = [s for s in stats if s["transformation"] == TILING]
        assert (tiling["attempts"], tiling["applied"], tiling["successes"], tiling["within_noise"],
                tiling["slowdowns"]) == (3, 3, 1, 1, 1), tiling
        assert tiling["success_rate"] == pytest.approx(1 / 3, abs=1e-3)
        table = (await _call(client, "history", {"session_id": sid})).content[0].text
        # v3's ratio is to v0 re-timed back to back with it: marked, and the mark explained
        assert "| 1.02 (noise) |" in table and "| 0.60† (slower) |" in table and "| 1.67 |" in table, table
        assert "†: against the base re-timed back to back with this version" in table
        assert "(noise): the middle halves of the two timings overlap" in table


# --- 4: tuning picks by more than one noisy median; the source says which configuration was timed -----------------

async def test_a_noisy_search_is_retimed_before_its_best_is_chosen(tmp_path: Path) -> None:
    """The search's brief timings (cv 1.0) put A=7 B=2 first and the truly fastest A=1 B=2 second: the three fastest
    are timed again before the best is chosen. get_version then says which configuration the time is of, beside a
    source whose params lines list other values first."""
    log = tmp_path / "jobs.jsonl"
    probed = {"cuda": {**CUDA_GPU["cuda"], "devices": [{**H100, "properties": {}}]}}

    def options(_backend: str, _index: int) -> dict[str, Any]:
        return {"name": H100["name"], "log": str(log), "search_ms": {"A=1 B=2": 0.095}}

    async with _served(tmp_path, "stand_in_devices.py", probed, options) as (client, _):
        sid = (await _call(client, "start_session", {"backend": "cuda", "sizes": {"M": 64, "N": 64, "K": 64}})
               ).structured_content["session_id"]
        v = (await _call(client, "submit_kernel", {"session_id": sid, "source": TUNED})).structured_content["version"]
        answer = await _call(client, "tune", {"session_id": sid, "version": v, "max_configs": 16})
        tuned = answer.structured_content
        searched = sorted((r for r in tuned["results"] if r["status"] == "ok"), key=lambda r: r["median_ms"])
        assert searched[0]["params"] == {"A": 7, "B": 2} and searched[0]["cv"] == 1.0  # the noisy search's order
        assert tuned["best"]["params"] == {"A": 1, "B": 2}, tuned["best"]
        assert [r["params"] for r in tuned["retimed"]] == [{"A": 7, "B": 2}, {"A": 1, "B": 2}, {"A": 8, "B": 2}]
        assert tuned["chosen_by"].startswith("re-timed the search's 3 fastest (cv up to 1; 2 within noise of the "
                                             "fastest)"), tuned["chosen_by"]
        assert "the fastest then: A=1 B=2 (the search's median had A=7 B=2 first)" in tuned["chosen_by"]
        assert "chosen by: re-timed" in answer.content[0].text
        jobs = [json.loads(line) for line in log.read_text().splitlines()]
        [retime] = [j for j in jobs if j["type"] == "tune" and j["retime"]]
        assert retime["configs"] == [r["params"] for r in tuned["retimed"]]
        assert [j["params"] for j in jobs if j["type"] == "evaluate"][-2:] == [{"A": 1, "B": 2}, {"A": 8, "B": 20}]

        detail = await _call(client, "get_version", {"session_id": sid, "version": v})
        assert detail.structured_content["report"]["performance"]["params"] == {"A": 1, "B": 2}
        configuration = detail.structured_content["configuration"]
        assert configuration == ("timed with A=1 B=2 (tuned): compiled as `#define A 1 #define B 2` before this "
                                 "source; the params line's first values (A=8 B=20) are only the defaults, not what "
                                 "was timed"), configuration
        text = detail.content[0].text  # the summary's lines, then each long part under its header
        assert f"\nconfiguration: {configuration}\n" in text and "\n\nsource:\n" in text
