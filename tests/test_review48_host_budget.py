"""Review 48 of 48ba34c/4d8f401 (the spare sets' host budget from /proc/meminfo): in a container, /proc/meminfo
shows the whole host's memory, not the container's memory cgroup, so a worker in a 16 GiB container on a 1 TiB host
took the 8 GiB maximum for its spare sets however little of its own limit was left."""

from __future__ import annotations

from pathlib import Path

import pytest

from peak_mcp.evaluation import reference_cache

GIB = 1 << 30


def _host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, available_kib: int,
          v2: tuple[str, int, int] | None = None, v1: tuple[int, int, int] | None = None) -> None:
    """A fake /proc/meminfo and memory cgroup files (limit, usage, reclaimable page cache), v2 and/or v1."""
    tmp_path.mkdir(exist_ok=True)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal:       {2 * available_kib} kB\nMemFree:        1 kB\n"
                       f"MemAvailable:   {available_kib} kB\n")
    monkeypatch.setattr(reference_cache, "MEMINFO", str(meminfo), raising=False)
    groups = []
    for name, files in (("v2", v2), ("v1", v1)):
        folder = tmp_path / name
        folder.mkdir()
        if files is not None:
            limit, usage, cache = files
            (folder / "limit").write_text(f"{limit}\n")
            (folder / "usage").write_text(f"{usage}\n")
            (folder / "stat").write_text(f"anon 1\ntotal_inactive_file {cache}\ninactive_file {cache}\n")
        groups.append((str(folder / "limit"), str(folder / "usage"), str(folder / "stat"),
                       "inactive_file" if name == "v2" else "total_inactive_file"))
    monkeypatch.setattr(reference_cache, "CGROUP_MEMORY", tuple(groups), raising=False)


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_a_containers_memory_limit_bounds_the_spare_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            version: str) -> None:
    # 1 TiB free on the host; the container may use 16 GiB and holds 15 of them: 1 GiB left, the floor's budget
    cgroup = (16 * GIB, 15 * GIB, 0)
    _host(tmp_path, monkeypatch, 1 << 30, **{version: cgroup})
    assert reference_cache._available_host_bytes() == GIB
    assert reference_cache.spare_host_budget() == reference_cache.HOST_BUDGET_BYTES


def test_page_cache_in_the_containers_usage_counts_as_available(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # usage includes the reclaimable page cache (a container that read large files sits near its limit)
    _host(tmp_path, monkeypatch, 1 << 30, v2=(128 * GIB, 127 * GIB, 100 * GIB))
    assert reference_cache._available_host_bytes() == 101 * GIB
    assert reference_cache.spare_host_budget() // 2 > (512 << 20) + (1 << 20)  # a GEMV's set still fits


def test_an_unlimited_cgroup_leaves_meminfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _host(tmp_path, monkeypatch, 64 << 20, v2=("max", 3 * GIB, 0))  # 64 GiB free
    assert reference_cache._available_host_bytes() == 64 * GIB
    _host(tmp_path / "v1", monkeypatch, 64 << 20, v1=(9223372036854771712, 3 * GIB, 0))
    assert reference_cache._available_host_bytes() == 64 * GIB
    _host(tmp_path / "none", monkeypatch, 64 << 20)  # no cgroup files: meminfo alone
    assert reference_cache.spare_host_budget() == 4 * GIB
