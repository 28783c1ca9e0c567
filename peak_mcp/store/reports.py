"""Turn stored records into what the agent reads: speedups, % of peak, % of the vendor library, tables."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from peak_mcp.core.devices import Device
from peak_mcp.core.timing import PRECISION
from peak_mcp.core.units import memory_bound, speed
from peak_mcp.evaluation.noise import NOISE, SLOWER, change
from peak_mcp.evaluation.phases import Baseline, Summary
from peak_mcp.store.records import SessionRow, VersionRow

_LOG_LIMIT = 4000
# params: the configuration timed (params_from: tuned, parent or defaults)
_SHOWN_TIMING = ("median_ms", "min_ms", "max_ms", "cv", "reps", "tflops", "gbps", "params", "params_from",
                 "params_inherited")


# Why a timing took as many launches as it did (timing.measure), said once beside the count.
STOPPED = {"steady": f" (stopped once the median held within {PRECISION:.1%})",
           "budget": " (as many as the time budget allowed)", "cap": " (the most a timing takes)"}


def how_timed(timing: Summary, baseline: Baseline | None) -> str:
    """How each side of pct_of_vendor was timed, in one line, and whether that compares like with like."""
    def side(s: Summary, launches: str) -> str:
        cache = "warm-cache" if s.cold_cache is False else "cold-cache"
        rounds = getattr(s, "rounds_ms", None)
        quietest = f", the quietest of {len(rounds)} rounds" if rounds and len(rounds) > 1 else ""
        ended = STOPPED.get(getattr(s, "stopped", None) or "", "")
        return f"{cache} median of {s.reps} {launches}{ended}{quietest}" if s.reps else f"{cache} median"

    text = "kernel " + side(timing, "launches")
    if baseline is None or not baseline.available or not baseline.median_ms:
        return text
    text += "; vendor " + side(baseline, "calls")
    if (timing.cold_cache is False) != (baseline.cold_cache is False):
        return text + ": not like for like (one from a cold cache, one warm)"
    return text + ": like for like"


def vendor_flag(timing: Summary, baseline: Baseline, pct: float) -> str | None:
    """Said plainly where a kernel reads faster than the vendor yardstick: rare, and most often a yardstick timed
    while the machine was busy (a shared CPU's BLAS most of all)."""
    if pct <= 100.0:
        return None
    if change(timing, baseline) == NOISE:
        return f"level with the vendor yardstick within noise ({pct:.0f}% by medians): the two spreads overlap"
    return (f"faster than the vendor yardstick ({pct:.0f}% of it): rare, so suspect the yardstick first (timed on a "
            "busy machine?); re-time both with benchmark before believing it")


def trim_log(text: str | None, limit: int = _LOG_LIMIT) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more characters)"


def compile_failure(log: str | None) -> str:
    """A failed compile in one line, for a report's message: its first error, and where the rest is. The whole
    log is the report's compile.log; repeating it in the message doubled every failed compile's answer."""
    lines = [line.strip() for line in (log or "").replace("\x00", "").splitlines() if line.strip()]
    if not lines:
        return "compilation failed (the compiler printed nothing)"
    first = next((line for line in lines if "error" in line.lower()), lines[0])
    rest = f"; compile.log has all {len(lines)} lines" if len(lines) > 1 else ""
    return f"compilation failed: {first}{rest}"


def median_ms(version: VersionRow | None) -> float | None:
    return version.median_ms if version is not None else None


def best_version(versions: Iterable[VersionRow]) -> VersionRow | None:
    """The fastest general version: a success (right at the session's sizes and at the sampled other sizes, or
    none could be sampled) with a time. Head is where work continues and may be slower; a compile-only session has
    no best."""
    timed = [v for v in versions if v.status.passed and v.timing is not None]
    return min(timed, key=lambda v: v.timing.median_ms if v.timing else 0.0, default=None)


def _label(params: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


def _tuned_on(version: VersionRow) -> str:
    """Where an inherited configuration was tuned: "v4's tuned", or "tuned on v3" where the parent v4 inherited it
    too."""
    on = version.timing.params_tuned_on if version.timing else None
    return f"tuned on v{on}" if on is not None and on != version.parent else f"v{version.parent}'s tuned"


def configuration(version: VersionRow) -> str | None:
    """The configuration a version's time is of, and where each value came from: "TILE=32 WPT=2 (tuned)", or
    "BM=64 BN=32 (v2's tuned) NUM_STAGES=2 (defaults)" where only some values were the parent's."""
    timing = version.timing
    if timing is None or not timing.params:
        return None
    inherited = timing.params_inherited
    if timing.params_from == "parent" and inherited is not None and set(inherited) != set(timing.params):
        theirs = {k: v for k, v in timing.params.items() if k in inherited}
        own = {k: v for k, v in timing.params.items() if k not in inherited}
        return (f"{_label(theirs)} ({_tuned_on(version)}) " if theirs else "") + f"{_label(own)} (defaults)"
    how = {"defaults": "defaults", "parent": _tuned_on(version)}.get(timing.params_from or "", "tuned")
    return _label(timing.params) + f" ({how})"


def compared(version: VersionRow, parent: VersionRow) -> str:
    """Which configuration each side of speedup_vs_parent ran, and whether that compares like with like, judged on
    the values: the same values of the parameters both declare, or each side at its own tuned configuration.
    Otherwise part of the ratio is the configuration's, and the untuned side is named."""
    mine, theirs = configuration(version), configuration(parent)
    if mine is None:
        return f"v{version.number} has no parameters; v{parent.number} at {theirs}"
    text = f"v{version.number} at {mine} vs v{parent.number} at {theirs}"
    a = (version.timing.params if version.timing else None) or {}
    b = (parent.timing.params if parent.timing else None) or {}

    def tuned(v: VersionRow) -> bool:  # timed at a configuration its own tune chose
        return bool(v.timing and v.timing.params and v.timing.params_from not in ("defaults", "parent"))

    shared = [k for k in a if k in b]
    differ = [k for k in shared if a[k] != b[k]]
    if shared and not differ and set(a) == set(b):
        return text + ": like for like (the same values)"
    if tuned(version) and tuned(parent):
        return text + ": like for like (each at its own tuned configuration)"
    if shared and not differ:
        return text + f": like for like on {' '.join(shared)} (the same values)"
    what = ", ".join(f"{k} {a[k]} vs {b[k]}" for k in differ) if differ else "different parameters"
    untuned = [v for v in (version, parent) if not tuned(v)]
    return text + (f": not like for like ({what}), tune "
                   + " and ".join(f"v{v.number}" for v in untuned) + " to compare")


def roofline_ms(flops: float, nbytes: float, device: Device, peak_path: str,
                baseline: Baseline | None) -> float | None:
    """The least time a launch can take on the session's device: max(flops / peak, bytes / bandwidth), the bandwidth
    the copy bandwidth the worker measured where it did (CUDA), else the device profile's. None where a term with
    work in it has no rate (no peak or no bandwidth known for this device)."""
    bandwidth = (baseline.copy_gbps if baseline is not None else None) or device.memory_bandwidth_gbps
    peak = device.peak(peak_path)
    if (flops and not peak) or (nbytes and not bandwidth) or not (flops or nbytes):
        return None
    compute = flops / (peak * 1e12) * 1e3 if flops and peak else 0.0
    memory = nbytes / (bandwidth * 1e9) * 1e3 if nbytes and bandwidth else 0.0
    return max(compute, memory)


def performance(version: VersionRow, versions: dict[int, VersionRow], baseline: Baseline | None,
                device: Device, peak_path: str, roofline: float | None = None) -> dict[str, Any] | None:
    """Timing plus the ratios that give it meaning (`baseline`: the vendor library's timing in the session)."""
    timing = version.timing
    if not timing:
        return None
    mine = timing.median_ms
    out: dict[str, Any] = {k: getattr(timing, k) for k in _SHOWN_TIMING if k in timing.model_fields_set}
    if timing.params:
        out["configuration"] = configuration(version)  # each value's origin: tuned, the parent's, or defaults
    # Ratios and verdicts compare records, or a back-to-back pair where this version's submission re-timed its
    # parent (records.Retimed): never a re-timing against a record taken at another moment.
    parent = versions.get(version.parent) if version.parent is not None else None
    if parent is not None and parent.timing and parent.timing.median_ms:
        theirs = parent.beside(parent.timing, version.number)
        out["speedup_vs_parent"] = theirs.median_ms / mine
        out["change_vs_parent"] = change(timing, theirs)  # the spreads of both timings decide, not the ratio
        if theirs is not parent.timing and parent.retimed is not None:
            out["parent_retimed"] = (f"v{parent.number} re-timed back to back with this version at "
                                     f"{theirs.median_ms:.4g} ms; its own record "
                                     f"{parent.timing.median_ms:.4g} ms")
        if parent.timing.params:
            out["vs_parent"] = compared(version, parent)
    first = versions.get(0)
    if first is not None and first.timing and first.timing.median_ms:
        base = first.beside(first.timing, version.number)
        out["speedup_vs_v0"] = base.median_ms / mine
        if base is not first.timing:
            out["v0_retimed"] = (f"v0 re-timed back to back with this version at {base.median_ms:.4g} ms; its own "
                                 f"record {first.timing.median_ms:.4g} ms")
        if first.number != version.number:
            out["change_vs_v0"] = change(timing, base)
    if baseline and baseline.available and baseline.median_ms:
        out["vendor_median_ms"] = baseline.median_ms
        out["pct_of_vendor"] = 100.0 * baseline.median_ms / mine
        flag = vendor_flag(timing, baseline, out["pct_of_vendor"])
        if flag:
            out["vendor_flag"] = flag
    out["timed"] = how_timed(timing, baseline)
    peak = device.peak(peak_path)
    if peak and timing.tflops is not None and not memory_bound(timing.tflops, timing.gbps):  # else bandwidth's
        out["pct_of_peak"] = 100.0 * timing.tflops / peak
        out["peak_path"] = peak_path
        out["peak_tflops"] = peak
    if device.memory_bandwidth_gbps and timing.gbps:  # the yardstick of memory-bound work (softmax, norms, sums)
        out["pct_of_bandwidth"] = 100.0 * timing.gbps / device.memory_bandwidth_gbps
    if roofline and mine:
        out["pct_of_roofline"] = round(100.0 * roofline / mine, 1)
    if baseline is not None and mine:
        for key, field in (("x_torch_eager", "torch_eager_ms"), ("x_torch_compile", "torch_compile_ms")):
            theirs = getattr(baseline, field)
            if theirs:
                out[key] = round(theirs / mine, 2)
    return out


def history_rows(session: SessionRow, versions: list[VersionRow], device: Device,
                 peak_path: str, roofline: float | None = None) -> list[dict[str, Any]]:
    by_number = {v.number: v for v in versions}
    best = best_version(versions)
    rows = []
    for v in versions:
        perf = performance(v, by_number, session.baseline, device, peak_path, roofline) or {}
        rows.append({
            "version": v.number, "parent": v.parent, "origin": v.origin,
            "transformation": v.transformation, "attempt": v.attempt, "status": v.status,
            "failure": v.failure, "median_ms": perf.get("median_ms"), "tflops": perf.get("tflops"),
            "gbps": perf.get("gbps"),
            "speedup_vs_parent": perf.get("speedup_vs_parent"), "change_vs_parent": perf.get("change_vs_parent"),
            "speedup_vs_v0": perf.get("speedup_vs_v0"), "change_vs_v0": perf.get("change_vs_v0"),
            # the ratio's base is a back-to-back re-timing, not the record in the base's own row
            "parent_retimed": True if perf.get("parent_retimed") else None,
            "v0_retimed": True if perf.get("v0_retimed") else None,
            "pct_of_vendor": perf.get("pct_of_vendor"),
            "above_vendor": True if perf.get("vendor_flag", "").startswith("faster") else None,
            "pct_of_peak": perf.get("pct_of_peak"), "pct_of_roofline": perf.get("pct_of_roofline"),
            "x_torch_eager": perf.get("x_torch_eager"), "x_torch_compile": perf.get("x_torch_compile"),
            "head": v.number == session.head, "best": best is not None and v.number == best.number,
            "params": v.timing.params if v.timing else None,  # the configuration timed, for a kernel with params
            "configuration": configuration(v),  # the same in words, with where it came from
        })
    return rows


RETIMED_MARK = "†"


def _ratio(row: dict[str, Any], ratio: str, judged: str, retimed: str) -> str:
    """A speedup, then what the spreads say of it: "1.02 (noise)", "0.60 (slower)"; marked † where its base was
    re-timed back to back with this version (then it is not the ratio of the two rows' ms)."""
    if row.get(ratio) is None:
        return ""
    return (format(row[ratio], ".2f") + (RETIMED_MARK if row.get(retimed) else "")
            + {NOISE: " (noise)", SLOWER: " (slower)"}.get(row.get(judged) or "", ""))


def markdown_table(rows: list[dict[str, Any]], keep: int | None = None) -> str:
    """The history as a markdown table. With `keep`, at most that many rows: v0, head and best, then the newest;
    a line names the versions left out (an answer's text stays short; its structured rows hold every version)."""
    def fmt(value: Any, spec: str) -> str:
        return "" if value is None else format(value, spec)

    left_out: list[int] = []
    if keep is not None and len(rows) > keep:
        first = [r["version"] for r in rows if r["version"] == 0 or r.get("head") or r.get("best")]
        kept = set(list(dict.fromkeys(first + [r["version"] for r in reversed(rows)]))[:keep])
        left_out = [r["version"] for r in rows if r["version"] not in kept]
        rows = [r for r in rows if r["version"] in kept]
    optional = {key: any(r.get(key) for r in rows) for key in ("pct_of_vendor", "pct_of_peak", "pct_of_roofline")}
    torch = any(r.get("x_torch_eager") is not None or r.get("x_torch_compile") is not None for r in rows)
    by_v0 = any(r.get("speedup_vs_v0") for r in rows)  # none where v0 was never timed (refused, failed)
    headers = ["v", "parent", "transformation", "status", "ms", "speed", "×parent", *(["×v0"] if by_v0 else [])]
    headers += [title for key, title in (("pct_of_vendor", "% vendor"), ("pct_of_peak", "% peak"),
                                         ("pct_of_roofline", "% roofline")) if optional[key]]
    headers += ["× torch eager", "× torch.compile"] if torch else []
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for r in rows:
        marks = [name for name in ("head", "best") if r.get(name)]
        mark = f" ({', '.join(marks)})" if marks else ""
        name = r["transformation"] or r["origin"]
        if r["attempt"]:
            name += f" #{r['attempt']}"
        if r.get("configuration"):
            name += f" [{r['configuration']}]"
        failure = (r["failure"] or "").removeprefix("generality_") if r["status"] == "not_general" else r["failure"]
        status = r["status"] + (f": {failure}" if failure and r["status"] not in ("benchmarked",) else "")
        cells = [f"{r['version']}{mark}", fmt(r["parent"], "d"), name, status, fmt(r["median_ms"], ".4g"),
                 speed(r["tflops"], r.get("gbps")),
                 _ratio(r, "speedup_vs_parent", "change_vs_parent", "parent_retimed")]
        if by_v0:
            cells.append(_ratio(r, "speedup_vs_v0", "change_vs_v0", "v0_retimed"))
        if optional["pct_of_vendor"]:
            cells.append(fmt(r["pct_of_vendor"], ".1f") + (" (!)" if r.get("above_vendor") else ""))
        if optional["pct_of_peak"]:
            cells.append(fmt(r["pct_of_peak"] or None, ".1f"))
        if optional["pct_of_roofline"]:
            cells.append(fmt(r.get("pct_of_roofline"), ".1f"))
        if torch:
            cells += [fmt(r.get("x_torch_eager"), ".2f"), fmt(r.get("x_torch_compile"), ".2f")]
        lines.append("| " + " | ".join(cells) + " |")
    first = next((r for r in rows if r["version"] == 0), None)
    if not by_v0 and first is not None and first["median_ms"] is None and len(rows) > 1:
        lines.append(f"(no ×v0 column: v0 was not timed ({first['status']}); compare with parents)")
    if any(r["median_ms"] for r in rows) and not optional["pct_of_roofline"] and not optional["pct_of_peak"]:
        lines.append("(no % of peak or roofline: the device has no known peak or bandwidth; compare versions)")
    if left_out:
        lines.append(f"({len(left_out)} more versions, of v{left_out[0]} to v{left_out[-1]}, are in the structured "
                     "rows; get_version shows one)")
    if any(r.get("above_vendor") for r in rows):
        lines.append("(!) faster than the vendor yardstick: rare, suspect the yardstick first; benchmark re-times both")
    if any(r.get("parent_retimed") or r.get("v0_retimed") for r in rows):
        lines.append(f"{RETIMED_MARK}: against the base re-timed back to back with this version (one moment, so the "
                     "ratio to trust), not against the base's own row, whose ms is its own recorded time.")
    if any(r.get("speedup_vs_parent") or r.get("speedup_vs_v0") for r in rows):
        lines.append("(noise): the middle halves of the two timings overlap; no gain or loss is shown. (slower): "
                     "slower beyond noise. A ratio with no mark is faster beyond noise.")
    return "\n".join(lines)
