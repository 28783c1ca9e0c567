"""A PNG chart of a session's lineage: versions as a tree by parent, speedup over version 0 on a log axis.

x is the depth in the lineage (v0 at 0, a child one step right of its parent), so branches read as branches rather
than as versions joined in numeric order. Failed attempts sit apart as grey crosses one step right of their parent.
Error bars span the fastest and slowest timed run of each version: differences inside them are noise.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Any

PASSED = ("benchmarked", "validated", "compiled")
NOT_GENERAL = "not_general"  # timed at the session's sizes, wrong at other sizes: drawn apart from the successes
LABEL_CHARS = 22


@dataclass(frozen=True)
class Layout:
    max_width_in: float
    height_in: float
    dpi: int
    max_labels: int | None  # versions named beside their points (None: every timed one)
    colors: int = 0  # a palette of this many colours (compact PNGs only)


# `peak-mcp show --out` writes a chart to read on a screen. The history tool's chart rides base64 in its answer: an
# agent's history was 97 KB with it, and a 50-version chain drew 1760 px wide, 300 KB. COMPACT caps it: a small
# figure, at most 8 versions named (head, best, v0 and versions wrong at other sizes first, then the newest; the
# table names all), no anti-aliasing and 16 colours: about 8 KB of base64 at 50 versions.
FULL = Layout(max_width_in=16.0, height_in=5.2, dpi=110, max_labels=None)
COMPACT = Layout(max_width_in=7.0, height_in=3.8, dpi=72, max_labels=8, colors=16)
_BACKEND_PREFIXES = ("hlsl-", "cuda-", "amd-", "hip-")


def short_label(row: dict[str, Any]) -> str:
    """`v3 groupshared tiling`: the version and its transformation, short enough to sit beside a point."""
    name = row.get("transformation") or ("naive" if row.get("origin") == "naive" else "")
    for prefix in _BACKEND_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
    name = name.replace("-", " ").replace("_", " ")
    if len(name) > LABEL_CHARS:
        name = name[:LABEL_CHARS - 1].rstrip() + "…"
    return f"v{row['version']} {name}".rstrip()


def depths(rows: list[dict[str, Any]]) -> dict[int, int]:
    """Steps from the root along parents; a parent missing from the rows counts as a root."""
    parent_of = {r["version"]: r["parent"] for r in rows}
    out: dict[int, int] = {}
    for number in parent_of:
        chain, cursor = [], number
        while cursor is not None and cursor not in out and cursor in parent_of and cursor not in chain:
            chain.append(cursor)
            cursor = parent_of[cursor]
        base = out.get(cursor, -1) if cursor is not None else -1
        for depth, version in enumerate(reversed(chain), start=base + 1):
            out[version] = depth
    return out


def _rate_unit(tflops: float) -> tuple[str, float]:
    """A FLOP/s unit that keeps tick labels short (lavapipe runs at MFLOP/s, a GPU at TFLOP/s)."""
    for name, scale in (("TFLOP/s", 1.0), ("GFLOP/s", 1e3), ("MFLOP/s", 1e6)):
        if tflops * scale >= 0.1:
            return name, scale
    return "kFLOP/s", 1e9


def _number(value: float) -> str:
    """3 significant digits without exponents for the usual range (0.001 to 10^6)."""
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if value >= 0.001 else f"{value:.1e}"


def _session_title(session: dict[str, Any]) -> str:
    sizes = "×".join(str(v) for v in (session.get("sizes") or {}).values())
    label = f" — {session['label']}" if session.get("label") else ""
    return (f"{session.get('problem', '?')} {session.get('dtype', '')} {sizes} on {session.get('device', '?')} "
            f"({session.get('backend', '?')}){label}")


def chart_marks(rows: list[dict[str, Any]]) -> dict[int, str]:
    """How the chart draws each version, as the README says: "head" (a star), "version" (a point in the tree),
    "not_general" (a hollow red ring: timed at the session's sizes, wrong at other sizes), "failed" (a grey cross
    beside its parent, even where it was timed before a later check failed it) and "untimed" (a grey circle: it
    passed what ran but was never timed)."""
    head = next((r["version"] for r in rows if r["head"]), None)
    out: dict[int, str] = {}
    for r in rows:
        if r["status"] not in PASSED and r["status"] != NOT_GENERAL:
            out[r["version"]] = "failed"
        elif not r.get("median_ms"):
            out[r["version"]] = "untimed"
        elif r["version"] == head:
            out[r["version"]] = "head"
        else:
            out[r["version"]] = "not_general" if r["status"] == NOT_GENERAL else "version"
    return out


def chart_summary(rows: list[dict[str, Any]]) -> str:
    """The chart's marks in words (the PNG's Description): head, best, and versions wrong at other sizes."""
    head = next((r["version"] for r in rows if r["head"]), None)
    best = next((r["version"] for r in rows if r.get("best")), None)
    parts = [f"head v{head}" if head is not None else "no head",
             f"best (fastest general version) v{best}" if best is not None else "no best"]
    wrong = [f"v{r['version']}" for r in rows if r["status"] == NOT_GENERAL]
    if wrong:
        parts.append("not general (wrong at other sizes): " + ", ".join(wrong))
    return "; ".join(parts)


def history_chart(rows: list[dict[str, Any]], session: dict[str, Any], *, peak_tflops: float | None = None,
                  vendor_name: str = "vendor library", compact: bool = False) -> bytes:
    """The PNG. `rows` are history rows (reports.history_rows), optionally with `min_ms`/`max_ms` for error bars;
    `session` is the stored session (problem, dtype, sizes, device, backend, label, baseline). `compact`: the chart
    an MCP answer carries (see COMPACT): small, few labels, flat colours in a small palette."""
    import matplotlib
    from matplotlib import pyplot as plt

    flat = {key: False for key in ("lines.antialiased", "patch.antialiased", "text.antialiased")} if compact else {}
    with matplotlib.rc_context(flat):
        fig = lineage_figure(rows, session, peak_tflops=peak_tflops, vendor_name=vendor_name, compact=compact)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", metadata={"Description": chart_summary(rows)})
    plt.close(fig)
    if not compact:
        return buffer.getvalue()
    from PIL import Image, PngImagePlugin

    # Without anti-aliasing the chart is a few flat colours: a small palette keeps every one of them.
    image = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB").quantize(colors=COMPACT.colors,
                                                                                method=Image.Quantize.FASTOCTREE)
    info = PngImagePlugin.PngInfo()
    info.add_text("Description", chart_summary(rows))
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True, pnginfo=info)
    return out.getvalue()


def lineage_figure(rows: list[dict[str, Any]], session: dict[str, Any], *, peak_tflops: float | None = None,
                   vendor_name: str = "vendor library", compact: bool = False) -> Any:
    """The matplotlib Figure behind history_chart (the caller closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    by_version = {r["version"]: r for r in rows}
    depth = depths(rows)
    # Speedups are over v0, or over the first timed version when v0 itself was not timed (it failed, or the
    # session's first kernel did not build): a session whose v1 benchmarked still has a chart.
    marks = chart_marks(rows)  # a failed version is never a point of the tree, even where it was timed
    v0 = next((v for v in sorted(by_version) if marks[v] in ("head", "version", "not_general")),
              min(by_version, default=None))
    v0_ms = by_version[v0]["median_ms"] if v0 is not None else None
    v0_tflops = by_version[v0]["tflops"] if v0 is not None else None

    def speedup(ms: float | None) -> float | None:
        return v0_ms / ms if v0_ms and ms else None

    timed = {r["version"]: r for r in rows
             if marks[r["version"]] in ("head", "version", "not_general") and speedup(r["median_ms"]) is not None}
    untimed = [r for r in rows if r["version"] not in timed]
    head = next((r["version"] for r in rows if r["head"]), None)
    on_head_path: set[int] = set()
    cursor = head
    while cursor is not None and cursor in by_version and cursor not in on_head_path:
        on_head_path.add(cursor)
        cursor = by_version[cursor]["parent"]

    columns = max(depth.values(), default=0) + 1
    layout = COMPACT if compact else FULL
    fig = plt.figure(figsize=(min(layout.max_width_in, max(6.5 if compact else 7.5, 2.0 + 1.6 * columns)),
                              layout.height_in), dpi=layout.dpi, layout="constrained")
    ax = fig.add_subplot()
    fig.suptitle(_session_title(session), fontsize=10)

    vendor = (session.get("baseline") or {})
    vendor_speedup = speedup(vendor.get("median_ms")) if vendor.get("available") else None
    peak_speedup = peak_tflops / v0_tflops if peak_tflops and v0_tflops else None
    ys = [speedup(r["median_ms"]) for r in timed.values()]
    ys += [speedup(r.get("max_ms")) or 0 for r in timed.values()] + [speedup(r.get("min_ms")) or 0 for r in
                                                                      timed.values()]
    ys += [s for s in (vendor_speedup, peak_speedup) if s]
    ys = [y for y in ys if y and y > 0] or [1.0]
    low, high = min(ys) / 1.6, max(ys) * 1.8
    ax.set_yscale("log")
    ax.set_ylim(low, high)
    ax.set_xlim(-0.4, columns - 0.4 + (0.9 if columns > 1 else 1.4))

    # edges parent -> child, the lineage of head drawn darker
    edges: list[tuple[tuple[float, float], tuple[float, float]]] = []
    for r in timed.values():
        parent = timed.get(r["parent"]) if r["parent"] is not None else None
        if parent is None:
            continue
        main = r["version"] in on_head_path
        start, end = (depth[parent["version"]], speedup(parent["median_ms"])), (depth[r["version"]],
                                                                               speedup(r["median_ms"]))
        ax.plot([start[0], end[0]], [start[1], end[1]], color="#1f4e79" if main else "#9ecae1",
                lw=2.0 if main else 1.1, zorder=1, linestyle="--" if r["status"] == NOT_GENERAL else "-")
        edges.append((start, end))  # type: ignore[arg-type]

    points: list[tuple[float, float, float]] = []  # x, y, half size in pixels: what labels must not cover
    not_general_count = 0
    for r in timed.values():
        x, y = depth[r["version"]], speedup(r["median_ms"])
        lo, hi = speedup(r.get("max_ms")), speedup(r.get("min_ms"))
        if lo and hi and hi > lo:
            ax.errorbar([x], [y], yerr=[[max(y - lo, 0)], [max(hi - y, 0)]], fmt="none", ecolor="#555555",
                        elinewidth=0.9, capsize=3, zorder=2)
        if r["version"] == head:
            ax.plot(x, y, marker="*", markersize=17, color="#f2a900", markeredgecolor="black", zorder=4)
            points.append((x, y, 12))
        elif r["status"] == NOT_GENERAL:  # its time is real, but it is no success: a hollow red ring
            ax.plot(x, y, marker="o", markersize=7, markerfacecolor="white", markeredgecolor="#d62728",
                    markeredgewidth=1.6, lw=0, zorder=3)
            points.append((x, y, 6))
        else:
            ax.plot(x, y, marker="o", markersize=6, color="#1f77b4", zorder=3)
            points.append((x, y, 5))
        not_general_count += r["status"] == NOT_GENERAL
        if r.get("best"):  # the fastest general version: a green ring, around the star when head is the best
            ax.plot(x, y, marker="o", markersize=21 if r["version"] == head else 13, markerfacecolor="none",
                    markeredgecolor="#2ca02c", markeredgewidth=1.8, lw=0, zorder=5)
            points.append((x, y, 13 if r["version"] == head else 8))

    # failed or untimed versions: apart from the tree, one step right of the parent, at the parent's height
    failed_count = untimed_count = 0
    per_parent: dict[Any, int] = {}
    for r in untimed:
        parent = timed.get(r["parent"]) if r["parent"] is not None else None
        slot = per_parent.get(r["parent"], 0)
        per_parent[r["parent"]] = slot + 1
        x = (depth[r["parent"]] + 1 if parent else depth[r["version"]]) - 0.22 - 0.07 * slot
        y = speedup(parent["median_ms"]) if parent else low * 1.15
        if marks[r["version"]] != "failed":  # compiled or validated but not timed (a compile-only session)
            ax.plot(x, y, marker="o", markersize=5, markerfacecolor="none", color="#999999", zorder=2)
            untimed_count += 1
        else:
            ax.plot(x, y, marker="x", markersize=5, color="#999999", zorder=2)
            failed_count += 1
        points.append((x, y, 4))

    # the yardsticks, named in the legend rather than on the plot where they would collide with labels
    unit, scale = _rate_unit(max((r["tflops"] or 0 for r in timed.values()), default=0))
    references = []
    for value, name, style, color in ((vendor_speedup, vendor_name, "--", "#2ca02c"),
                                      (peak_speedup, "device peak", ":", "#7f7f7f")):
        if value:
            rate = f" {_number(value * v0_tflops * scale)} {unit}" if v0_tflops else ""
            ax.axhline(value, color=color, linestyle=style, lw=1.2, zorder=0)
            edges.append(((ax.get_xlim()[0], value), (ax.get_xlim()[1], value)))
            references.append(Line2D([], [], color=color, linestyle=style, lw=1.2,
                                     label=f"{name}{rate} ({_number(value)}×)"))

    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{_number(v)}×"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel(f"speedup over v{v0} (log)" if v0 is not None else "speedup (log)")
    if columns > 16:  # 50 steps: every tick would overlap
        ax.xaxis.set_major_locator(MaxNLocator(nbins=12, integer=True))
    else:
        ax.set_xticks(range(columns))
    ax.set_xlabel("steps from v0 along the lineage")
    ax.grid(alpha=0.35, which="major", axis="y")
    ax.grid(alpha=0.12, which="minor", axis="y")
    if v0_tflops:
        rate = ax.secondary_yaxis("right", functions=(lambda s: s * v0_tflops * scale,
                                                      lambda t: t / (v0_tflops * scale)))
        rate.set_ylabel(unit)
        rate.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        rate.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _number(v)))
        rate.yaxis.set_minor_formatter(NullFormatter())
    if not timed:
        ax.text(0.5, 0.5, "no timed versions yet", transform=ax.transAxes, ha="center", color="#777777")

    handles = [Line2D([], [], marker="o", color="#1f77b4", lw=1.1, label="version (edge: parent → child)"),
               Line2D([], [], marker="*", color="#f2a900", markeredgecolor="black", markersize=12, lw=0,
                      label="head")]
    if any(r.get("best") for r in timed.values()):
        handles.append(Line2D([], [], marker="o", markerfacecolor="none", markeredgecolor="#2ca02c",
                              markeredgewidth=1.8, markersize=10, lw=0, label="best (fastest general version)"))
    if any(r.get("min_ms") for r in timed.values()):
        handles.append(Line2D([], [], marker="|", color="#555555", lw=0, markersize=10, label="min–max of timed runs"))
    if not_general_count:
        handles.append(Line2D([], [], marker="o", markerfacecolor="white", markeredgecolor="#d62728",
                              markeredgewidth=1.6, lw=1.1, linestyle="--", color="#9ecae1",
                              label=f"not general: wrong at other sizes ({not_general_count})"))
    if failed_count:
        handles.append(Line2D([], [], marker="x", color="#999999", lw=0, label=f"failed attempt ({failed_count})"))
    if untimed_count:
        handles.append(Line2D([], [], marker="o", markerfacecolor="none", color="#999999", lw=0,
                              label=f"not timed ({untimed_count})"))
    handles += references
    columns_of_legend = len(handles) if len(handles) <= 4 else 3  # long entries: four to a row overflow the figure
    fig.legend(handles=handles, loc="outside lower center", ncol=columns_of_legend, fontsize=8, frameon=False)

    fig.canvas.draw()  # settle the layout, then freeze it so the labels are placed against final positions
    fig.set_layout_engine("none")
    named = labelled(timed, head, layout.max_labels)
    _place_labels(fig, ax, [(depth[v], speedup(r["median_ms"]), short_label(r),
                             6 if v == head else 3 if r.get("best") else 0)
                            for v, r in sorted(timed.items()) if v in named], points, edges)
    return fig


def labelled(timed: dict[int, dict[str, Any]], head: int | None, most: int | None) -> set[int]:
    """The versions the chart names: all, or at most `most`: head, best, v0 and those wrong at other sizes first,
    then the newest. The history table names every version."""
    if most is None or len(timed) <= most:
        return set(timed)
    first = [v for v in timed if v == head or timed[v].get("best") or v == min(timed)]
    first += [v for v in timed if timed[v]["status"] == NOT_GENERAL]
    return set(list(dict.fromkeys(first + sorted(timed, reverse=True)))[:most])


# Offsets (points) tried in order for each label: right of the point first, then above/below it, then left.
_CANDIDATES = [(7, 0), (7, 9), (7, -9), (0, 12), (0, -14), (7, 18), (7, -18), (-7, 0), (-7, 10), (-7, -10),
               (7, 28), (7, -28), (-7, 22), (-7, -22), (0, 30), (0, -32)]


def _place_labels(fig: Any, ax: Any, labels: list[tuple[float, float, str, float]],
                  points: list[tuple[float, float, float]],
                  edges: list[tuple[tuple[float, float], tuple[float, float]]]) -> None:
    """Greedy placement: each label takes the first candidate offset whose box overlaps no placed label, no marker,
    no edge and stays inside the axes; failing that, the one with the least overlap. Far ones get a leader line."""
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    markers = []
    for x, y, half in points:
        px, py = ax.transData.transform((x, y))
        markers.append((px - half, py - half, px + half, py + half))
    lines = []  # edges as a trail of small boxes, so a label crossing one costs in proportion to the crossing
    for start, end in edges:
        (x0, y0), (x1, y1) = ax.transData.transform(start), ax.transData.transform(end)
        steps = max(1, int(math.hypot(x1 - x0, y1 - y0) / 4))
        for i in range(1, steps):
            px, py = x0 + (x1 - x0) * i / steps, y0 + (y1 - y0) * i / steps
            lines.append((px - 1.5, py - 1.5, px + 1.5, py + 1.5))
    placed: list[tuple[float, float, float, float]] = []

    def overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
        w = min(a[2], b[2]) - max(a[0], b[0])
        h = min(a[3], b[3]) - max(a[1], b[1])
        return w * h if w > 0 and h > 0 else 0.0

    # lowest first: labels of slow versions crowd near v0, fast ones spread out above
    for x, y, text, extra in sorted(labels, key=lambda item: (item[1], item[0])):  # extra: room for a big marker
        own = ax.transData.transform((x, y))
        best = None
        for dx, dy in ((dx + math.copysign(extra, dx) if dx else dx, dy + math.copysign(extra, dy) if dy else dy)
                       for dx, dy in _CANDIDATES):
            ha = "left" if dx > 0 else "right" if dx < 0 else "center"
            note = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", ha=ha, va="center",
                               fontsize=7.5, zorder=5)
            box = note.get_window_extent(renderer)
            rect = (box.x0 - 1, box.y0 - 1, box.x1 + 1, box.y1 + 1)
            cost = sum(overlap(rect, p) for p in placed)
            cost += sum(overlap(rect, m) for m in markers if not (m[0] < own[0] < m[2] and m[1] < own[1] < m[3]))
            cost += 0.5 * sum(overlap(rect, e) for e in lines)
            outside = (max(0.0, frame.x0 - rect[0]) + max(0.0, rect[2] - frame.x1) + max(0.0, frame.y0 - rect[1])
                       + max(0.0, rect[3] - frame.y1))
            cost += outside * 50
            note.remove()
            if best is None or cost < best[0]:
                best = (cost, dx, dy, ha, rect)
            if cost == 0:
                break
        assert best is not None
        _, dx, dy, ha, rect = best
        far = abs(dy) > 12
        ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", ha=ha, va="center", fontsize=7.5,
                    zorder=5, arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "#888888", "shrinkA": 0,
                                          "shrinkB": 4} if far else None)
        placed.append(rect)
