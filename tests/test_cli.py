"""The command line over a real data dir (a lavapipe session), and the lineage chart drawn from it."""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import struct
import sys
from pathlib import Path
from typing import Any

import pytest
import structlog
from mcp import Client, StdioServerParameters

from peak_mcp.api.cli import build_parser, main
from peak_mcp.core.config import Settings
from peak_mcp.core.devices import Device, cuda_family
from peak_mcp.loop.devices import Devices
from peak_mcp.loop.service import PeakService
from peak_mcp.runner.pool import DevicePool
from peak_mcp.store.charts import depths, lineage_figure, short_label
from peak_mcp.store.database import Store
from tests.conftest import EXAMPLES, has_device, skip_reason

SIZES = {"M": 48, "N": 40, "K": 24}
needs_lavapipe = pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """v0 naive; v1 tiled (from v0); v2 register-blocked (from v1); v3 unannotated (from v2, fails);
    v4 register-blocked again from v0, which becomes head: a tree whose numeric order is not its lineage."""
    if not has_device("hlsl"):
        pytest.skip(f"no Vulkan device: {skip_reason('hlsl')}")
    settings = Settings(data_dir=tmp_path_factory.mktemp("cli") / "data")
    settings.benchmark_budget_s = 0.1
    service = PeakService(settings)
    try:
        sid = service.start_session("matmul", "hlsl", "f32", SIZES, label="cli test").session_id
        tiled = (EXAMPLES / "hlsl" / "tiled_groupshared.hlsl").read_text()
        blocked = (EXAMPLES / "hlsl" / "register_blocked.hlsl").read_text()
        reports = [service.submit_kernel(sid, tiled, parent=0, transformation="hlsl-groupshared-tiling"),
                   service.submit_kernel(sid, blocked, parent=1, transformation="register-blocking-2d"),
                   service.submit_kernel(sid, "not a kernel", parent=2, transformation="vectorized-loads"),
                   service.submit_kernel(sid, blocked, parent=0, transformation="register-blocking-2d")]
        assert [r.status for r in reports] == ["benchmarked", "benchmarked", "invalid_annotation", "benchmarked"]
        assert reports[-1].head == 4
        rows = service.history(sid).rows
        timings = {v.number: v.timing.model_dump() if v.timing else None for v in service.store.versions(sid)}
        session = service.store.session(sid).model_dump()
    finally:
        service.close()
    return {"dir": settings.data_dir, "sid": sid, "rows": rows, "timings": timings, "session": session,
            "blocked": blocked}


def cli(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """main() in this process. It points logging at the captured stderr, which closes after the test: the logging
    set-up is put back, or every later test that logs would write to a closed file."""
    configured, saved, handlers = structlog.is_configured(), structlog.get_config(), list(logging.root.handlers)
    try:
        with pytest.raises(SystemExit) as exit_info:
            main(list(args))
    finally:
        if configured:
            structlog.configure(**saved)
        else:
            structlog.reset_defaults()
        for handler in set(logging.root.handlers) - set(handlers):
            logging.root.removeHandler(handler)
    out, err = capsys.readouterr()
    return exit_info.value.code or 0, out, err


@pytest.fixture
def no_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """The viewing commands must neither probe devices nor start a worker: both trip the test."""
    def tripwire(*_: Any, **__: Any) -> Any:
        raise AssertionError("a viewing command touched the devices")

    monkeypatch.setattr(Devices, "probe", tripwire)
    monkeypatch.setattr(DevicePool, "run", tripwire)


# --- argument parsing -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [["--data-dir", "/x/y", "serve"], ["serve", "--data-dir", "/x/y"],
                                  ["--data-dir", "/elsewhere", "serve", "--data-dir", "/x/y"]])
def test_data_dir_goes_before_or_after_the_command(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert args.command == "serve" and args.data_dir == Path("/x/y")


def test_data_dir_defaults_to_none_either_way() -> None:
    assert build_parser().parse_args(["sessions"]).data_dir is None
    assert build_parser().parse_args(["--log-level", "DEBUG", "show", "abc"]).log_level == "DEBUG"


@pytest.mark.anyio
async def test_serve_with_data_dir_after_the_command_uses_it(tmp_path: Path) -> None:
    """What the README documents: `peak-mcp serve --data-dir X` (it used to be a usage error)."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "peak_mcp", "serve", "--data-dir",
                                                                 str(tmp_path / "d")], env=dict(os.environ))
    async with Client(params, read_timeout_seconds=120) as client:
        listed = await client.call_tool("list_sessions", {})
        assert not listed.is_error and listed.structured_content["sessions"] == []
    assert (tmp_path / "d" / "peak.sqlite3").exists()


# --- sessions / show / export -----------------------------------------------------------------------------------
def test_sessions_lists_each_session_on_one_line(data, capsys, no_devices) -> None:
    code, out, _ = cli("sessions", "--data-dir", str(data["dir"]), capsys=capsys)
    assert code == 0
    [line] = out.splitlines()
    fastest = min((n for n, t in data["timings"].items() if t), key=lambda n: data["timings"][n]["median_ms"])
    for part in (data["sid"], "cli test", "matmul", "hlsl", "f32", "M=48,N=40,K=24", "head v4", f"best v{fastest}",
                 f"{data['timings'][fastest]['median_ms']:.4g} ms"):
        assert part in line, (part, line)


def test_show_prints_the_table_and_writes_the_chart(data, capsys, no_devices, tmp_path) -> None:
    chart = tmp_path / "sub" / "chart.png"
    code, out, _ = cli("--data-dir", str(data["dir"]), "show", data["sid"], "--out", str(chart), capsys=capsys)
    assert code == 0
    # v4 is head, and also best when lavapipe timed it the fastest
    assert re.search(r"\| 4 \(head(, best)?\) \| 0 \| register-blocking-2d \| benchmarked \|", out), out
    assert "| 3 | 2 | vectorized-loads | invalid_annotation" in out
    png = chart.read_bytes()
    assert png.startswith(b"\x89PNG")
    width, height = struct.unpack(">II", png[16:24])
    assert width >= 800 and height >= 500


def test_show_of_an_unknown_session_fails_with_the_reason(data, capsys, no_devices) -> None:
    code, _, err = cli("show", "nosuchsession", "--data-dir", str(data["dir"]), capsys=capsys)
    assert code == 1 and "unknown session 'nosuchsession'" in err
    assert "`peak-mcp sessions` lists the sessions" in err and "list_sessions" not in err  # a command, not a tool


def test_export_writes_source_and_report(data, capsys, no_devices, tmp_path) -> None:
    code, out, _ = cli("export", data["sid"], "head", "--out", str(tmp_path), "--data-dir", str(data["dir"]),
                       capsys=capsys)
    assert code == 0
    stem = tmp_path / f"{data['sid']}-v4"
    assert out.split() == [str(stem) + suffix for suffix in (".hlsl", ".json", ".md")]
    assert stem.with_suffix(".hlsl").read_text() == data["blocked"]
    meta = json.loads(stem.with_suffix(".json").read_text())
    assert meta["report"]["version"] == 4 and meta["report"]["status"] == "benchmarked"
    assert meta["report"]["performance"]["median_ms"] == pytest.approx(data["timings"][4]["median_ms"])
    assert meta["session"]["sizes"] == SIZES and meta["source_file"] == f"{data['sid']}-v4.hlsl"
    markdown = stem.with_suffix(".md").read_text()
    assert "status: **benchmarked**" in markdown and "| median_ms |" in markdown and "Generality: passed" in markdown


def test_export_of_a_failed_version_carries_its_failure(data, capsys, no_devices, tmp_path) -> None:
    code, _, _ = cli("export", data["sid"], "3", "--out", str(tmp_path), "--data-dir", str(data["dir"]),
                     capsys=capsys)
    assert code == 0
    assert (tmp_path / f"{data['sid']}-v3.hlsl").read_text() == "not a kernel"
    assert "invalid_annotation" in (tmp_path / f"{data['sid']}-v3.md").read_text()


@pytest.mark.parametrize(("version", "expected"), [("9", "has no version 9"), ("v2", "is not a number")])
def test_export_rejects_a_missing_version(data, capsys, no_devices, tmp_path, version, expected) -> None:
    code, _, err = cli("export", data["sid"], version, "--out", str(tmp_path), "--data-dir", str(data["dir"]),
                       capsys=capsys)
    assert code == 1 and expected in err
    assert list(tmp_path.iterdir()) == []
    if version == "9":
        assert f"run `peak-mcp show {data['sid']}`" in err and "call history" not in err


def test_the_views_escape_what_an_old_data_dir_holds(capsys, no_devices, tmp_path) -> None:
    """Labels, transformation names, messages and logs written before input was checked reach the operator's
    terminal as escapes: nothing retitles or clears it, and no stored newline forges a line."""
    trick = "\x1b]0;pwned\x07\x1b[2J"
    store = Store(Settings(data_dir=tmp_path / "data").database)
    device = Device(name="compile-only (no GPU)", backend="cuda", index=-1, arch="sm_90", family=cuda_family("sm_90"))
    sid = store.create_session(problem="matmul", backend="cuda", dtype="f32", sizes={"M": 8, "N": 8, "K": 8},
                               device=device.name, device_index=-1, label=trick + "\nabcdef012345  forged  matmul",
                               device_info=device.model_dump())
    source = f"// {trick}\n"
    store.add_version(sid, parent=None, origin="submit", transformation=f"x{trick}\n| 9 (head) | forged row |",
                      source=source, status="compile_error", failure="compile", message=f"compilation failed:{trick}",
                      compile={"ok": False, "log": f"kernel.cu(1): error: {trick}"})
    store.close()
    data_dir = str(tmp_path / "data")
    for argv in (("sessions",), ("show", sid), ("export", sid, "0", "--out", str(tmp_path / "out"))):
        code, out, err = cli(*argv, "--data-dir", data_dir, capsys=capsys)
        assert code == 0, err
        assert not {"\x1b", "\x07"} & set(out + err), (argv, out)
        if argv[0] == "sessions":
            [line] = out.splitlines()
            assert "\\x1b]0;pwned\\x07\\x1b[2J\\nabcdef012345  forged" in line
        if argv[0] == "show":
            assert len(out.splitlines()) == 4  # the session, the table's two header lines, one row
            assert "\\n| 9 (head) | forged row |" in out
    markdown = (tmp_path / "out" / f"{sid}-v0.md").read_text()
    assert "\x1b" not in markdown and "\x07" not in markdown and "error: \\x1b]0;pwned" in markdown
    assert (tmp_path / "out" / f"{sid}-v0.cu").read_text() == source  # the kernel itself is exported as written


def test_viewing_an_empty_place_creates_nothing(capsys, tmp_path) -> None:
    code, _, err = cli("sessions", "--data-dir", str(tmp_path / "none"), capsys=capsys)
    assert code == 0 and "no sessions in" in err
    code, _, _ = cli("show", "abc", "--data-dir", str(tmp_path / "none"), capsys=capsys)
    assert code == 1
    assert not (tmp_path / "none").exists()


# --- the chart -------------------------------------------------------------------------------------------------
def test_depth_follows_parents_not_numbers() -> None:
    rows = [{"version": 0, "parent": None}, {"version": 1, "parent": 0}, {"version": 2, "parent": 1},
            {"version": 3, "parent": 0}, {"version": 4, "parent": 2}, {"version": 5, "parent": 9}]
    assert depths(rows) == {0: 0, 1: 1, 2: 2, 3: 1, 4: 3, 5: 0}


def test_short_labels() -> None:
    assert short_label({"version": 0, "origin": "naive", "transformation": None}) == "v0 naive"
    assert short_label({"version": 3, "origin": "apply", "transformation": "hlsl-groupshared-tiling"}) == \
        "v3 groupshared tiling"
    assert short_label({"version": 7, "origin": "submit", "transformation": None}) == "v7"
    long = short_label({"version": 2, "origin": "apply", "transformation": "loop-unrolling-and-launch-bounds"})
    assert long.endswith("…") and len(long) <= 3 + 22


def _texts(fig: Any) -> tuple[Any, list[Any]]:
    ax = fig.axes[0]
    labels = [t for t in ax.texts if t.get_text().startswith("v")]
    return ax, labels


def _boxes_apart(fig: Any, ax: Any, labels: list[Any]) -> None:
    from matplotlib.text import Text

    renderer = fig.canvas.get_renderer()
    for t in labels:
        t.update_positions(renderer)
    boxes = [Text.get_window_extent(t, renderer) for t in labels]  # the words, without a leader line
    for (i, a), (j, b) in itertools.combinations(enumerate(boxes), 2):
        assert not a.overlaps(b), (labels[i].get_text(), labels[j].get_text())
    frame = ax.get_window_extent(renderer)
    title = fig._suptitle.get_window_extent(renderer)
    assert title.y0 >= frame.y1  # the title sits above the plot, clear of it and of every label
    for text, box in zip(labels, boxes, strict=True):
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1, \
            text.get_text()


def test_chart_of_the_real_session_is_a_tree(data) -> None:
    from matplotlib import pyplot as plt

    rows = [{**r, "min_ms": (data["timings"][r["version"]] or {}).get("min_ms"),
             "max_ms": (data["timings"][r["version"]] or {}).get("max_ms")} for r in data["rows"]]
    fig = lineage_figure(rows, data["session"])
    try:
        ax, labels = _texts(fig)
        v0 = data["timings"][0]["median_ms"]
        speed = {n: v0 / t["median_ms"] for n, t in data["timings"].items() if t}
        edges = {(tuple(line.get_xdata()), tuple(round(y, 9) for y in line.get_ydata())) for line in ax.lines
                 if len(line.get_xdata()) == 2 and line.get_transform() == ax.transData}  # not the yardstick lines
        expected = {((0, 1), (1.0, speed[1])), ((1, 2), (speed[1], speed[2])), ((0, 1), (1.0, speed[4]))}
        assert edges == {(x, tuple(round(y, 9) for y in ys)) for x, ys in expected}  # no v2 -> v4 numeric join
        head = [line for line in ax.lines if line.get_marker() == "*"]
        assert len(head) == 1 and tuple(head[0].get_xdata()) == (1,) and head[0].get_ydata()[0] == \
            pytest.approx(speed[4])
        [failed] = [line for line in ax.lines if line.get_marker() == "x"]
        assert 2 < failed.get_xdata()[0] < 3 and failed.get_ydata()[0] == pytest.approx(speed[2])  # beside v2
        assert sorted(t.get_text() for t in labels) == ["v0 naive", "v1 groupshared tiling",
                                                       "v2 register blocking 2d", "v4 register blocking 2d"]
        assert len(ax.collections) == sum(1 for t in data["timings"].values() if t and t["max_ms"] > t["min_ms"])
        assert ax.get_yscale() == "log" and "llvmpipe" in fig._suptitle.get_text()
        _boxes_apart(fig, ax, labels)
    finally:
        plt.close(fig)


def _row(version: int, parent: int | None, ms: float | None, name: str | None, *, status: str = "benchmarked",
         head: bool = False) -> dict[str, Any]:
    return {"version": version, "parent": parent, "origin": "naive" if parent is None else "apply",
            "transformation": name, "attempt": None, "status": status, "failure": None, "median_ms": ms,
            "tflops": 137.4 / ms if ms else None, "head": head, "min_ms": ms and ms * 0.97,
            "max_ms": ms and ms * 1.05}


def test_crowded_siblings_keep_their_labels_apart_and_the_yardsticks_are_speedups() -> None:
    from matplotlib import pyplot as plt

    names = ["shared-memory-tiling", "register-blocking-2d", "vectorized-loads", "double-buffering", "warp-tiling",
             "tensor-cores", "split-k"]
    rows = [_row(0, None, 100.0, None)]
    rows += [_row(i + 1, 0, 100 / s, names[i]) for i, s in enumerate((1.1, 1.12, 1.15, 1.2, 2.0, 2.05))]
    rows += [_row(7, 6, 25.0, names[6]), _row(8, 7, None, "cuda-cp-async", status="compile_error"),
             _row(9, 7, None, "cuda-cp-async", status="failed"), _row(10, 7, 16.0, "tile-size-tuning", head=True)]
    session = {"problem": "matmul", "dtype": "f32", "sizes": {"M": 4096, "N": 4096, "K": 4096}, "backend": "cuda",
               "device": "NVIDIA H100 80GB HBM3", "label": None, "baseline": {"available": True, "median_ms": 12.5}}
    fig = lineage_figure(rows, session, peak_tflops=60.0, vendor_name="cuBLAS")
    try:
        ax, labels = _texts(fig)
        assert len(labels) == 9
        _boxes_apart(fig, ax, labels)
        flat = {round(line.get_ydata()[0], 6) for line in ax.lines if line.get_linestyle() in ("--", ":")}
        assert flat == {8.0, round(60.0 / 1.374, 6)}  # cuBLAS 12.5 ms vs v0 100 ms; peak over v0's TFLOP/s
        legend = [t.get_text() for t in fig.legends[0].get_texts()]
        assert "failed attempt (2)" in legend and any(t.startswith("cuBLAS 11 TFLOP/s (8×)") for t in legend)
        crosses = [line for line in ax.lines if line.get_marker() == "x"]
        assert len(crosses) == 2 and all(2 < c.get_xdata()[0] < 3 for c in crosses)  # v7 is at depth 2
    finally:
        plt.close(fig)


def test_a_session_whose_v0_failed_charts_the_versions_that_were_timed() -> None:
    """Issue 20: `show` drew "no timed versions yet" for a session whose v0 failed and whose v1 benchmarked.
    Speedups are then over the first timed version."""
    from matplotlib import pyplot as plt

    rows = [_row(0, None, None, None, status="failed"), _row(1, 0, 40.0, "shared-memory-tiling"),
            _row(2, 1, 20.0, "register-blocking-2d", head=True)]
    session = {"problem": "matmul", "dtype": "f32", "sizes": {"M": 256, "N": 256, "K": 256}, "backend": "hlsl",
               "device": "llvmpipe", "label": None, "baseline": None}
    fig = lineage_figure(rows, session)
    try:
        ax, _ = _texts(fig)
        assert "no timed versions yet" not in [t.get_text() for t in ax.texts]
        assert ax.get_ylabel() == "speedup over v1 (log)"
        [head] = [line for line in ax.lines if line.get_marker() == "*"]
        assert head.get_ydata()[0] == pytest.approx(2.0)
        assert len([line for line in ax.lines if line.get_marker() == "x"]) == 1  # v0, failed
    finally:
        plt.close(fig)


@needs_lavapipe
def test_the_demo_exits_non_zero_when_a_kernel_fails_and_a_timeout_names_the_limit(tmp_path) -> None:
    """Issue 20: the demo exited 0 when kernels failed, and a timeout blamed the kernel. Now a kernel that does
    not compile and one that outlives the fence timeout make it exit 1, naming both; the timeout line names the
    limits and smaller sizes, not a broken kernel."""
    import subprocess

    broken = tmp_path / "broken.hlsl"
    broken.write_text((EXAMPLES / "hlsl" / "naive.hlsl").read_text().replace("acc += ", "acc += undefined_name + "))
    slow = tmp_path / "slow.hlsl"  # 65535 x 1024 groups of a loop lavapipe runs for long: outlives 3 s
    slow.write_text((EXAMPLES.parent / "faults" / "hang.hlsl").read_text().replace("groups=(64, 64, 1)",
                                                                                    "groups=(65535, 1024, 1)"))
    env = {**os.environ, "PEAK_MCP_VK_FENCE_TIMEOUT_S": "3"}
    done = subprocess.run([sys.executable, "-m", "peak_mcp", "demo", "--backend", "hlsl", "--sizes", "M=32,N=32,K=32",
                           "--data-dir", str(tmp_path / "data"), "--kernels", str(broken), str(slow)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    [summary] = [line for line in done.stderr.splitlines() if line.startswith("demo: ")]
    assert summary.startswith("demo: 2 kernel(s) did not pass: broken.hlsl: compile_error (compile); slow.hlsl: error "
                              "(timeout)"), summary
    assert "a timeout at M=32,N=32,K=32 is a job limit, not a broken kernel" in done.stderr
    assert "PEAK_MCP_VK_FENCE_TIMEOUT_S" in done.stderr and "--sizes" in done.stderr
