"""The text block of each answer: a short summary an LLM (or a client that reads only text) acts on.

structuredContent is the whole record; the text used to be the same JSON again, which doubled every answer. Here
it is the facts a next step depends on, in lines: what happened (status, the failing check, the message), the
times and what they mean (speedups with their noise verdict, % of vendor and peak, how each side was timed), and
where head and best stand. Text that is the point of a call (a kernel's source, a compile log, a diff, a brief, a
transformation's text, the ABI) follows the summary whole, once (responses.LONG_PARTS), not here. Every function
reads the lean dict that is the structured content, so the two cannot disagree.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from peak_mcp.core.text import clipped
from peak_mcp.core.units import rate, speed

Summarize = Callable[[dict[str, Any]], list[str]]


def _sizes(sizes: dict[str, Any] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in (sizes or {}).items())


def _g(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _traits_origin(p: dict[str, Any]) -> str:
    if p.get("traits_probed"):
        return "read from a probe of the reference: which outputs move when one input element does"
    if p.get("reference"):  # said only where the problem has no Python reference
        return "guessed from the buffer shapes alone: the problem has no Python reference to probe"
    return ("guessed from the buffer shapes alone: the probe of its Python reference (one input element changed, "
            "which outputs move) told nothing apart")


def standing(d: dict[str, Any], best: str = "best") -> str:
    head, top = d.get("head"), d.get(best)
    return (f"head v{head}" if head is not None else "no head") + (f", best v{top}" if top is not None else
                                                                    ", no best (no general version timed)")


def performance(perf: dict[str, Any] | None) -> list[str]:
    """A version's times in two or three lines: median and rate with its speedups (and their noise verdicts), the
    yardsticks, how each side was timed, and the vendor flag where a kernel reads faster than the vendor."""
    if not perf:
        return []
    parts = [f"median {_g(perf.get('median_ms'))} ms ({speed(perf.get('tflops'), perf.get('gbps')) or 'n/a'})"]
    if perf.get("p25_ms") is not None:
        parts[0] += f", middle half {_g(perf['p25_ms'])}-{_g(perf['p75_ms'])} ms"
    for key, who in (("parent", "its parent"), ("v0", "v0")):
        ratio = perf.get(f"speedup_vs_{key}")
        same = key == "v0" and ratio == perf.get("speedup_vs_parent")  # the parent is v0: said once
        if ratio is not None and not same and (key == "parent" or perf.get("change_vs_v0")):
            verdict = perf.get(f"change_vs_{key}")
            if verdict == "within noise" and not 0.8 <= ratio <= 1.25 and perf.get("cv") is not None:
                # a large ratio called noise reads as a contradiction unless the spread that makes it so is said
                verdict += (f": the timings spread widely (this one's cv {perf['cv']:.2g}); time again on a quieter "
                            "machine")
            if key == "parent" and perf.get("parent_retimed"):
                verdict = f"{verdict}: {perf['parent_retimed']}" if verdict else perf["parent_retimed"]
            parts.append(f"{ratio:.3g}× {who}" + (f" ({verdict})" if verdict else ""))
    if perf.get("pct_of_vendor") is not None:
        parts.append(f"{perf['pct_of_vendor']:.3g}% of vendor ({_g(perf.get('vendor_median_ms'))} ms)")
    if perf.get("pct_of_peak") is not None:
        parts.append(f"{perf['pct_of_peak']:.3g}% of peak")
    if perf.get("pct_of_roofline") is not None:
        parts.append(f"{perf['pct_of_roofline']:.3g}% of roofline")
    for key, who in (("x_torch_eager", "torch eager"), ("x_torch_compile", "torch.compile")):
        if perf.get(key) is not None:
            parts.append(f"{perf[key]:.3g}× {who}")
    lines = ["time: " + ", ".join(parts)]
    if perf.get("params"):
        configuration = perf.get("configuration") or (" ".join(f"{k}={v}" for k, v in perf["params"].items())
                                                       + f" ({perf.get('params_from', 'tuned')})")
        lines.append(f"configuration timed: {configuration}"
                     + (f"; {perf['vs_parent']}" if perf.get("vs_parent") else ""))
    if perf.get("timed"):
        lines.append(f"timed: {perf['timed']}")
    if perf.get("vendor_flag"):
        lines.append(f"FLAG: {perf['vendor_flag']}")
    return lines


def version(d: dict[str, Any]) -> list[str]:
    what = d.get("transformation") or d.get("origin") or ""
    parent = f"parent v{d['parent']}, " if d.get("parent") is not None else ""
    lines = [f"v{d['version']} {d['status']}" + (f" ({d['failure']})" if d.get("failure") else "")
             + f" [{parent}{what}]".replace(" []", "")]
    if d.get("message"):
        lines.append(f"message: {d['message']}")
    lines += performance(d.get("performance"))
    generality = d.get("generality")
    if generality and generality.get("passed") is not None and d["status"] != "not_general":
        checked = len(generality.get("sizes_checked") or [])
        lines.append(f"generality: {'passed' if generality['passed'] else 'failed'} at {checked} sampled other sizes")
    elif generality and generality.get("note"):
        lines.append(f"generality: {generality['note']}")
    lines += sanitizer((d.get("validation") or {}).get("sanitizer"))
    tuning = d.get("tuning")
    if tuning and tuning.get("best"):
        chosen = f"; {tuning['chosen_by']}" if tuning.get("chosen_by") else ""
        best = tuning["best"]
        label = " ".join(f"{k}={v}" for k, v in best["params"].items())
        # the time above is the full one recorded for it; the search's short estimate is said as such
        timed = "its full time above; " if tuning.get("recorded") else ""
        if tuning.get("full") and not tuning.get("recorded"):  # timed in full and not taken: never "best"
            lines.append(f"tuned: {tuning.get('tried')} configurations; the search's fastest, {label} (its estimate "
                         f"{_g(best['median_ms'])} ms), took {_g(tuning['full']['median_ms'])} ms in full and was not "
                         f"taken{chosen}")
        else:
            own = f"; {tuning['versus_own']}" if tuning.get("recorded") and tuning.get("versus_own") else ""
            lines.append(f"tuned: {tuning.get('tried')} configurations, best {label} ({timed}the search's estimate "
                         f"{_g(best['median_ms'])} ms{own}){chosen}")
    if tuning and tuning.get("failures"):
        lines.append(f"tune: {len(tuning['failures'])} configurations failed")
        lines += tune_failures(tuning["failures"], d["version"], shown=len(tuning["failures"]))
    lines.append(d["note"] if d.get("note") else standing(d))
    return lines


SANITIZER_WORDS = {"vulkan_oob": "Vulkan validation layer: out-of-bounds buffer accesses",
                   "memcheck": "memcheck", "racecheck": "racecheck", "initcheck": "initcheck", "synccheck": "synccheck"}


def sanitizer(s: dict[str, Any] | None) -> list[str]:
    """One line on the sanitizer run of a version: clean (and what it did not check), failed, or why it did not
    run, so that a skipped check is never read as a clean one."""
    if not s:
        return []
    skipped = "; ".join(f"{u.get('tool')}: {clipped(u.get('message') or '', 160)}" for u in s.get("unchecked") or [])
    if not s.get("available"):
        return [f"sanitizer: unavailable ({s.get('why') or s.get('what') or 'not installed'})"]
    if s.get("passed") is None:
        return [f"sanitizer: not run ({skipped or 'no reason given'})"]
    if s.get("passed"):
        tools = [SANITIZER_WORDS.get(t, t) for t in s.get("clean") or []]
        vulkan = any(t.startswith("vulkan") for t in s.get("clean") or [])
        return [f"sanitizer: clean at {_sizes(s.get('sizes'))} ({', '.join(tools)})"
                + (f"; not checked: {skipped}" if skipped else "")
                + ("; races and uninitialized groupshared reads are not checked on Vulkan" if vulkan else "")]
    return []  # a failure is the version's message


def session(d: dict[str, Any]) -> list[str]:
    device = d.get("device") or {}
    label = f" ({d['label']})" if d.get("label") else ""
    lines = [f"session {d['session_id']}{label}: {d['problem']} {d['dtype']} {_sizes(d.get('sizes'))} on "
             f"{device.get('name', '?')} ({d['backend']})"
             + (f"; constraints {', '.join(d['constraints'])}" if d.get("constraints") else "")]
    lines += yardstick(d.get("baseline"))
    if d.get("note"):
        lines.append(f"note: {d['note']}")
    if d.get("version_0"):
        lines += version({**d["version_0"], "head": d.get("head"), "best": d.get("best")})[:-1]
    lines.append(standing(d))
    return lines


def _paths(baseline: dict[str, Any]) -> str:
    """Which of torch's paths the eager time is, and the others' times: '; eager is sdpa cudnn, the fastest of
    default 0.45, sdpa flash 0.8, ...'."""
    path, by_path = baseline.get("torch_eager_path"), baseline.get("torch_eager_paths")
    if not path or not isinstance(by_path, dict):
        return ""
    others = [f"{name} {_g(ms)} ms" if isinstance(ms, int | float) else f"{name} {str(ms)[:80]}"
              for name, ms in by_path.items() if name != path]
    return f"; eager is torch's {path} path, the fastest of those timed" + (f" ({'; '.join(others)})" if others
                                                                              else "")


def yardstick(baseline: dict[str, Any] | None) -> list[str]:
    if not baseline:
        return []
    if not baseline.get("available"):
        lines = [f"vendor yardstick: none ({baseline.get('reason', 'no reason given')})"]
    else:
        rounds = baseline.get("rounds_ms")
        spread = f", the medians of its {len(rounds)} rounds {', '.join(_g(r) for r in rounds)} ms" \
            if rounds and len(rounds) > 1 else ""
        which = "the quietest round's median" if spread else "median"
        lines = [f"vendor yardstick: {baseline.get('library')}: {which} {_g(baseline.get('median_ms'))} ms "
                 f"({rate(baseline.get('tflops'))}), {'warm' if baseline.get('cold_cache') is False else 'cold'} "
                 f"cache{spread}"]
    torch = [f"{who} {_g(baseline[key])} ms" for key, who in (("torch_eager_ms", "eager"),
                                                               ("torch_compile_ms", "torch.compile"))
             if baseline.get(key) is not None]
    if torch:
        compiled = f" (compiled in {_g(baseline['torch_compile_s'])} s)" if baseline.get("torch_compile_s") else ""
        lines.append(f"torch yardsticks: {', '.join(torch)}{compiled}{_paths(baseline)}")
    if baseline.get("torch_note"):
        lines.append(f"torch yardsticks: {baseline['torch_note']}")
    if baseline.get("copy_gbps"):
        lines.append(f"copy bandwidth (roofline): {_g(baseline['copy_gbps'])} GB/s measured")
    return lines


def check(d: dict[str, Any]) -> list[str]:
    v = d.get("validation") or {}
    verdict = "passed" if d.get("passed") else f"failed ({v.get('check')})"
    lines = [f"v{d['version']} at {_sizes(d.get('sizes'))}: {verdict}"]
    if v.get("message"):
        lines.append(f"message: {v['message']}")
    scope = [f"scope: {d['scope']}"] if d.get("scope") else []
    return lines + performance(d.get("performance")) + yardstick(d.get("baseline")) + scope


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def history(d: dict[str, Any]) -> list[str]:
    return [f"{d['problem']} {d['dtype']} {_sizes(d.get('sizes'))} on {d.get('device')} ({d['backend']}): "
            f"{_count(len(d.get('rows') or []), 'version')}; " + standing(d)]


def detail(d: dict[str, Any]) -> list[str]:
    lines = version(d["report"])
    if d.get("configuration"):
        lines.append(f"configuration: {d['configuration']}")
    return lines


def diff(d: dict[str, Any]) -> list[str]:
    changed = [line for line in d.get("diff", "").splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    added = sum(line.startswith("+") for line in changed)
    return [f"diff v{d['a']} -> v{d['b']}: {added} lines added, {len(changed) - added} removed"]


def session_list(d: dict[str, Any]) -> list[str]:
    rows = d.get("sessions") or []
    lines = [f"{_count(d.get('total', len(rows)), 'session')}; {len(rows)} from offset {d.get('offset', 0)}:"]
    for s in rows:
        label = f" ({s['label']})" if s.get("label") else ""
        lines.append(f"{s['session_id']}{label}: {s['problem']} {s['backend']} {s['dtype']} {_sizes(s.get('sizes'))} "
                     f"on {s.get('device')}; {_count(s.get('versions') or 0, 'version')}, "
                     + (f"head v{s['head']}" if s.get("head") is not None else "no head")
                     + f", best {s.get('best') or '-'}")
    return lines


def problem_defined(d: dict[str, Any]) -> list[str]:
    """define_problem's answer: the problem in one line, as list_problems shows it (its ABIs follow, LONG_PARTS)."""
    line = problems({"problems": [d]})[0]
    # Without a Python reference the line's `reference:` says what v0 is (start_session's reference_kernel).
    naive = "" if d.get("naive") is None or d["naive"] or d.get("reference") else \
        "; no naive kernel: a session's first submission is its v0"
    return [f"defined {line}{naive}"]


def _naive(backends: list[str]) -> str:
    return f"; a naive kernel only for {', '.join(backends)}" if backends else "; no naive kernel"


def problems(d: dict[str, Any]) -> list[str]:
    """One line per problem: the ABIs (a few hundred characters per backend, most of it the same rules each time)
    stay in the structured content, and a session's briefs carry its own."""
    lines = []
    for p in d.get("problems") or []:
        by_backend = p.get("dtypes_by_backend") or {}
        offers = "; ".join(f"{b} ({', '.join(by_backend.get(b, p['dtypes']))})" for b in p["backends"])
        lines.append(f"{p['name']}: {p['title']}; sizes {', '.join(p['sizes'])} (defaults "
                     f"{_sizes(p.get('default_sizes'))}); dtypes by backend: {offers}"
                     + (_naive(p['naive']) if p.get("naive") is not None else "")
                     + (f"; traits {', '.join(p['traits'])}" if p.get("traits") else "")
                     + (f" ({_traits_origin(p)}: the file declares no TRAITS; a wrong guess gives the wrong "
                        "catalog texts, so declare them, e.g. TRAITS = ['normalization'] for a LayerNorm, ['scan'] "
                        "for a cumsum)" if p.get("traits_guessed") else "")
                     + (f"; reference: {p['reference']}" if p.get("reference") else "")
                     + (f"; from {p['source']}" if p.get("source") else ""))
    lines += [f"problem file {e.get('level', 'error')}: {e.get('file')}" + (f" line {e['line']}" if e.get("line")
                                                                             else "") + f": {e.get('message')}"
              for e in d.get("errors") or []]
    if d.get("problems") and not any(p.get("abi") for p in d["problems"]):
        lines.append("A problem's kernel ABI (signature or bindings, launch annotation, what outputs must hold) for "
                     "every backend and dtype: list_problems(problem=NAME); start_session gives the session's own.")
    return lines


def doctor(d: dict[str, Any]) -> list[str]:
    lines = [f"peak-mcp {d.get('version')}; data dir {d.get('data_dir') or '(elsewhere)'}"]
    for b in d.get("backends") or []:
        devices = ", ".join(str(x.get("name")) for x in b.get("devices") or []) or "no device"
        state = "runs kernels" if b.get("can_run") else "compiles only" if b.get("usable") else "unusable"
        lines.append(f"{b['backend']}: {state}; {devices}")
        lines += [f"  missing {m['what']}: {m['why']} (fix: {m['fix']})" for m in b.get("missing") or []]
    if d.get("sandbox"):
        lines.append(f"sandbox: {d['sandbox']}")
    catalog = d.get("catalog") or {}
    if catalog:
        lines.append(f"catalog: {catalog.get('transformations')} transformations"
                     + (f"; errors: {'; '.join(catalog['errors'])}" if catalog.get("errors") else ""))
    return lines


def transformations(d: dict[str, Any]) -> list[str]:
    lines = [f"{t['id']}: {t['title']} [{', '.join(t.get('backends') or [])}]: {t.get('summary', '')}"
             for t in d.get("transformations") or []]
    return lines + [f"catalog error: {e}" for e in d.get("errors") or []] or [d.get("note") or
                                                                              "no transformation matches"]


def transformation(d: dict[str, Any]) -> list[str]:
    facts = [f"backends {', '.join(d.get('backends') or [])}"]
    for key in ("devices", "problems", "tags", "after"):
        if d.get(key):
            facts.append(f"{key} {', '.join(d[key])}")
    if d.get("extends"):
        facts.append(f"extends {d['extends']}")
    if d.get("resolved_from"):
        facts.append(f"resolved from {d['resolved_from']}")
    return [f"{d['id']}: {d['title']} ({'; '.join(facts)})"]


def tune_failures(failures: list[str], version: int, shown: int = 8) -> list[str]:
    """Each configuration a tune tried that failed, with its cause (the first `shown`; get_version has them all)."""
    lines = [f"failed: {f}" for f in failures[:shown]]
    if len(failures) > shown:
        lines.append(f"and {len(failures) - shown} more failed: get_version(version={version}) lists them")
    return lines


def tune(d: dict[str, Any]) -> list[str]:
    lines = [f"reused: {d['reused']}"] if d.get("reused") else []
    lines.append(f"tuned v{d['version']} ({d['strategy']}): {d['tried']} of {d['valid_size']} valid configurations "
                 f"(space {d['space_size']}, {d.get('where_pruned', 0)} ruled out by where); {d['stopped']}")
    best, recorded = d.get("best"), d.get("recorded")
    if best:
        label = " ".join(f"{k}={v}" for k, v in best["params"].items())
        estimate = f"{_g(best['median_ms'])} ms ({speed(best.get('tflops'), best.get('gbps')) or 'n/a'})"
        retimed = any(r.get("params") == best["params"] for r in d.get("retimed") or [])
        how = "re-timed after the search" if retimed else "short timings"
        if recorded:
            lines.append(f"best: {label}; v{d['version']}'s recorded time {_g(recorded['median_ms'])} ms "
                         f"({speed(recorded.get('tflops'), recorded.get('gbps')) or 'n/a'}): timed in full on device "
                         f"{d.get('recorded_device')}, "
                         "what history shows")
            if d.get("versus_own"):
                lines.append(f"{label} {d['versus_own']}")
            lines.append(f"the search's own estimate ({how}): {estimate}"
                         + (f"; {d['estimate_gap']}" if d.get("estimate_gap") else ""))
        elif d.get("full"):  # timed in full and not taken (the first line says why): its estimate is no "best"
            full = d["full"]
            rate_in_full = speed(full.get("tflops"), full.get("gbps")) or "n/a"
            against = d.get("estimate_gap") or f"against {_g(full['median_ms'])} ms ({rate_in_full}) timed in full"
            lines.append(f"the search's own estimate of {label} ({how}): {estimate}; {against}")
        else:
            lines.append(f"best: {label} at {estimate}: the search's own estimate ({how}), not a full timing")
    if d.get("chosen_by"):
        lines.append(f"chosen by: {d['chosen_by']}")
    passed = [r for r in d.get("results") or [] if r.get("status") == "ok"]
    if passed:
        shown = passed[:5]
        # each configuration's first short timing, not a full one: a chosen configuration need not lead this list
        which = f"the {len(shown)} fastest of {len(passed)}" if len(passed) > len(shown) else f"all {len(passed)}"
        lines.append(f"short timings during the search ({which} that passed, before any full timing): " + "; ".join(
            " ".join(f"{k}={v}" for k, v in r["params"].items()) + f" {_g(r.get('median_ms'))} ms"
            + (f" (cv {r['cv']:.2g})" if r.get("cv") is not None else "") for r in shown))
    failed = d.get("failed_count", 0)  # counted before the answer kept its few
    pruned = d.get("pruned_count", 0)
    if failed or pruned:
        lines.append(f"{failed} failed their checks, {pruned} pruned (each in the record)")
    lines += tune_failures(d.get("failures") or [], d["version"])
    if d.get("tried") and not d.get("passed_count"):
        lines.append(f"none of the {d['tried']} configurations tried passed its checks: the version keeps what it had")
    return [*lines, standing(d, "best_version")]


def stats(d: dict[str, Any]) -> list[str]:
    lines = [f"scope: {d['scope']}"] if d.get("scope") else []
    for s in d.get("transformations") or []:
        median, tuned = s.get("median_speedup_vs_parent"), s.get("median_tune_speedup")
        judged = s.get("successes", 0) + s.get("within_noise", 0) + s.get("slowdowns", 0)
        uncompared = s.get("applied", 0) - judged  # passed, but no like-for-like parent time (a failed parent)
        # each figure says what it is measured against: the parent, or the session's fastest before it where that
        # differs (an agent read 16.9x of a step whose parent was itself 0.30x of its own)
        best = s.get("median_speedup_vs_best_before")
        against = (f" ({best:.3g}× over the session's fastest version before it)"
                   if best is not None and median and abs(best / median - 1) > 0.01 else "")
        tuned_later, adopted = s.get("tuned_later") or 0, s.get("tune_adopted") or 0
        kept = tuned_later - adopted  # a tune that took nothing (its own configuration stayed) counts as tuned
        tune = (f"; tuned later: {tuned_later} (" + "; ".join(part for part in (
            f"{adopted} took another configuration: tune gained a median {tuned:.3g}× more, tune's gain, not the "
            "text's" if tuned is not None else "",
            f"{kept} kept {'its' if kept == 1 else 'their'} own" if kept > 0 else "") if part) + ")"
            if tuned_later else "")
        unanswered, still_open = s.get("unanswered_runs") or 0, s.get("open_runs") or 0
        never = (f"{unanswered} run{'s' if unanswered > 1 else ''} opened and never answered ({still_open} still "
                 "open)") if unanswered else ""
        if not s["attempts"]:
            lines.append(f"{s['transformation']}: no submission; {never or 'no run'}")
            continue
        lines.append(f"{s['transformation']}: {s['attempts']} attempts, {s.get('applied', 0)} general and passed: "
                     f"{s.get('successes', 0)} faster than their parent beyond noise (successes), "
                     f"{s.get('within_noise', 0)} within noise, {s.get('slowdowns', 0)} slower"
                     + (f", {uncompared} not compared (no timed parent to compare with)" if uncompared > 0 else "")
                     + (f"; median speedup {median:.3g}× as submitted, over the parent{against}"
                        if median is not None else "")
                     + tune
                     + (f"; {never}" if never else "")
                     + (f"; failures {s['failure_kinds']}" if s.get("failure_kinds") else ""))
    return lines if d.get("transformations") else [*lines, "no transformation attempted yet"]


def suggestions(d: dict[str, Any]) -> list[str]:
    basis = (f"for v{d['ranked_from']} (the latest compiled; head v{d['head']} stays put without timing)"
             if d.get("ranked_from") is not None else f"for head v{d['head']}")
    lines = [basis + (f" (best v{d['best']})" if d.get("best") is not None else "")
             + f" on {d.get('device')}; applied: {', '.join(d.get('applied') or []) or 'none'}; features: "
             f"{', '.join(d.get('features') or []) or 'none'}"]
    if d.get("behind_best"):
        lines.append(f"note: {d['behind_best']}")
    if not d.get("suggestions"):
        return [*lines, d.get("note") or "no suggestion"]
    if d.get("note"):  # beside suggestions: none of them is expected to beat the head
        lines.append(f"note: {d['note']}")
    return lines + [f"{i}. {s['id']}: {s['why']}" for i, s in enumerate(d.get("suggestions") or [], 1)]


def apply_step(d: dict[str, Any]) -> list[str]:
    speed = {"faster beyond noise": "faster than its parent beyond noise",
             "within noise": "no faster than its parent beyond noise", "slower beyond noise": "a slowdown beyond "
             "noise"}.get(d.get("speed") or "", "speed against its parent not known")
    state = (f"applied and passed, {speed}" if d.get("succeeded") else "ended without success") \
        if d.get("done") else "open"
    lines = [f"apply {d['transformation']} (text: {d['resolved_transformation']}), run {d['run_id']}: {state}, "
             f"attempt {d['attempt']} of {d['max_attempts']}"]
    for key in ("message", "note"):
        if d.get(key):
            lines.append(f"{key}: {d[key]}")
    attempts = d.get("attempts") or []
    if attempts:
        last = attempts[-1]
        lines.append(f"last attempt: v{last['version']} {last['status']}"
                     + (f" ({last['failure']})" if last.get("failure") else ""))
        lines += performance(last.get("performance"))
    if d.get("brief"):
        lines += ["brief:", d["brief"]]
    return lines


def profile(d: dict[str, Any]) -> list[str]:
    at = f" at {d['configuration']}" if d.get("configuration") else ""
    lines = [f"profile of v{d.get('version')}{at} ({d.get('backend')}, entry {d.get('entry')}) on {d.get('device')}"]
    for part in ("resources", "occupancy", "instruction_mix", "counters"):
        section = d.get(part) or {}
        if section.get("available") is False:
            lines.append(f"{part}: unavailable: {section.get('why')}")
            continue
        shown = {k: v for k, v in section.items() if k not in ("available", "groups", "ops", "memory", "metrics",
                                                               "units", "blocks_by_limit", "device_limits")}
        for key in ("groups", "ops", "metrics"):
            if section.get(key):
                shown[key] = section[key]
        lines.append(f"{part}: " + json.dumps(shown, separators=(",", ":"), ensure_ascii=False))
    return lines


SUMMARIES: dict[str, Summarize] = {
    "VersionReport": version, "Submission": version, "SessionInfo": session, "CheckReport": check,
    "HistoryReport": history, "VersionDetail": detail, "DiffReport": diff, "SessionList": session_list,
    "ProblemList": problems, "ProblemInfo": problem_defined, "DoctorReport": doctor,
    "TransformationList": transformations,
    "TransformationText": transformation, "TuneAnswer": tune, "StatsReport": stats, "Suggestions": suggestions,
    "ApplyStep": apply_step, "profile": profile,
}


def summary(kind: str, structured: dict[str, Any]) -> str:
    """The text block for an answer of model `kind`: its summary, or (a model without one) the compact JSON."""
    make = SUMMARIES.get(kind)
    if make is None:
        return json.dumps(structured, separators=(",", ":"), ensure_ascii=False)
    return "\n".join(make(structured))
