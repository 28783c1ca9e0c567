"""suggest_next: transformations ranked for a session's head, each with one line of why.

The ranking reads only what is recorded: which transformations the head's lineage already went through (a label
whose work the head's code does not show is not taken as done), what its code visibly has (catalog.features: shared
tiles, vector loads, tensor-core instructions ...), the catalog's order hints (`after`: what a text usually follows,
among the texts that exist for the session; the "Expected effect" section naming next steps), the session's
backend, problem, dtype, device and sizes, the session's earlier attempts at each text, and a text's own `measured`
speeds. Ranked last, in this order of weight: a text that failed repeatedly in the session and never passed, one
whose prerequisites (`after`) the head has not done (named as what to apply first), one measured slower than its
parent on the session's device or unfit for it (a CPU device, where a text's whole gain is a GPU mechanism such as
shared-memory banks; an unrolling text for a head with nothing left to unroll). A prerequisite is named as the
session backend's own text, and one a version outside the head's lineage applied is said so, with that version.
An attempt's speed is the one its submission reported (noise.change, the version as submitted against its parent
then). Only texts that apply to the session are proposed. It is a heuristic for where to look next, not a
prediction of speed.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, Field

from peak_mcp.catalog.features import SHARED_TILES, source_features, unrollable_loops
from peak_mcp.catalog.transformations import Catalog, DeviceDescriptor, Transformation
from peak_mcp.core.devices import Device
from peak_mcp.core.errors import InvalidInput
from peak_mcp.evaluation.noise import SLOWER, change
from peak_mcp.evaluation.phases import Timing
from peak_mcp.problems.base import Problem
from peak_mcp.store.records import SessionRow, Status, VersionRow

_NEXT_STEP = re.compile(r"`([a-z0-9]+(?:-[a-z0-9]+)+)`")
TENSOR_TAGS = {"tensor-cores", "mfma", "wgmma", "mma"}


class Suggestion(BaseModel):
    id: str = Field(description="pass this to apply_transformation")
    title: str
    score: float
    why: str
    tried: list[str] = Field(default_factory=list, description="this text's earlier attempts in the session, "
                             "outside the head's lineage, with their outcomes")
    first: list[str] = Field(default_factory=list, description="what the text usually comes after and the head "
                             "has not done: apply one of these first")


class Suggestions(BaseModel):
    session_id: str
    head: int
    best: int | None = None  # the fastest general version (server instructions)
    ranked_from: int | None = Field(None, description="the version ranked for when it is not the head: in a "
                                    "compile-only session head stays on v0, so the latest version that compiled")
    backend: str
    dtype: str
    device: str
    applied: list[str] = Field(description="transformations in the ranked version's lineage, oldest first")
    features: list[str] = Field(description="what the ranked version's source visibly has")
    suggestions: list[Suggestion]
    note: str | None = Field(None, description="when there is no suggestion: why; beside suggestions: that none of "
                             "them is expected to beat the ranked version on this device")
    behind_best: str | None = Field(None, description="when the ranked version is slower than the best beyond noise: "
                                    "by how much, and how to build on the best instead")


def lineage(versions: list[VersionRow], head: int) -> list[VersionRow]:
    """The head and its ancestors, oldest first."""
    by_number = {v.number: v for v in versions}
    chain, cursor = [], by_number.get(head)
    while cursor is not None and cursor not in chain:
        chain.append(cursor)
        cursor = by_number.get(cursor.parent) if cursor.parent is not None else None
    return chain[::-1]


def _next_steps(t: Transformation) -> set[str]:
    """Ids a text's "Expected effect" section names as what comes next."""
    match = re.search(r"^##\s*Expected effect\s*$(.*?)(?=^##\s|\Z)", t.body, re.MULTILINE | re.DOTALL)
    return set(_NEXT_STEP.findall(match.group(1))) if match else set()


def require_head(session: SessionRow) -> None:
    """InvalidInput for a session without a head: suggestions start from it. Checked before anything else is looked
    up for the session (its device, its problem)."""
    if session.head is None:
        raise InvalidInput(f"session {session.id} has no passing version yet",
                           "submit a kernel that compiles and validates first; suggestions start from the head.")


# Lineage labels the head's source must bear out before the text counts as done: a version labelled
# vectorized-loads whose code reads nothing through a vector pointer did not do vectorized-loads.
LABEL_SHOWS: dict[str, str] = {
    "shared-memory-tiling": SHARED_TILES, "hlsl-groupshared-tiling": SHARED_TILES,
    "vectorized-loads": "128-bit vectors", "vectorized-row-access": "128-bit vectors",
    "cuda-cp-async": "cp.async", "warp-shuffle-reduction": "warp shuffles",
    "hlsl-wave-reduction": "wave reductions", "thread-block-clusters": "clusters",
}
_FAILED = {Status.INVALID_ANNOTATION, Status.INVALID_REPLY, Status.COMPILE_ERROR, Status.FAILED, Status.ERROR}
REPEATED_FAILURES = 2  # a text that failed this often (and never passed) in the session ranks after untried ones


def suggest_next(catalog: Catalog, session: SessionRow, versions: list[VersionRow], device: Device, problem: Problem,
                 best: int | None, limit: int = 5) -> Suggestions:
    """The catalog's texts ranked for a session's head (`versions`: all of the session's; `best`: the fastest general
    version's number), from its records alone."""
    session_id = session.id
    require_head(session)
    backend, dtype, sizes = session.backend, session.dtype, session.sizes
    descriptor = DeviceDescriptor.of(device)
    basis = session.head
    if not session.runs:  # nothing is timed, head stays on v0: rank for where the agent's work has got to
        basis = max((v.number for v in versions if v.status is Status.COMPILED), default=basis)
    chain = lineage(versions, basis)
    applied = [v.transformation for v in chain if v.transformation]
    features, done, unshown = _what_is_done(catalog, chain, backend, descriptor, dtype, problem)
    by_feature = {id for covers in features.values() for id in covers}
    hinted = {step for name in done if name in catalog for step in _next_steps(catalog.get(name))}
    in_lineage = {v.number for v in chain}

    ranked: dict[str, Suggestion] = {}
    later: dict[str, tuple[bool, int, bool]] = {}  # (failed repeatedly, steps before it applies, slower or unfit)
    listed = catalog.list(backend=backend, device=descriptor, problem=session.problem, dtype=dtype,
                          traits=problem.traits)
    exists = {t.id for t in listed}  # an `after` naming a text that does not exist for the session is no hint
    # a prerequisite is named as the session's own text (hlsl-groupshared-tiling, not shared-memory-tiling)
    names = {id: catalog.resolve(id, backend, descriptor, dtype).id for id in exists}
    elsewhere = _applied_elsewhere(catalog, versions, in_lineage, names)
    for t in listed:
        target = catalog.resolve(t.id, backend, descriptor, dtype)
        if target.id in ranked or {t.id, target.id} & (done | by_feature):
            continue
        if not (target.for_backend(backend) and target.for_dtype(dtype)
                and target.for_problem(session.problem, problem.traits)):
            continue
        score, reasons = _score(target, done | by_feature, hinted, features, dtype, sizes, device, problem, exists,
                                names=names, elsewhere=elsewhere)
        if target.id in unshown:
            reasons.insert(0, f"the head's lineage is labelled {target.id}, but its code shows no "
                              f"{unshown[target.id]}: not done")
        measured = target.measured_on(descriptor)
        slower = bool(measured and measured[1] < 1)
        if measured and slower:  # a figure is quoted with where it was taken, never as if this session's
            where = target.measured_where(measured[0])
            figure = (f"measured {measured[1]:g}× its parent on {measured[0]} ({where}, the text's own "
                      "measurement, not this session's)" if where else
                      f"records a slowdown on {measured[0]} (on which problem, it does not say)")
            reasons.append(f"its text {figure}: likely slower here, so it ranks below the ready texts without such "
                           "a figure; time it before building on it")
        unfit = _unfit(target, device, backend, chain[-1].source)
        if unfit and not slower:  # a measured slowdown here already says enough
            reasons.append(f"{unfit}: ranked below the texts that fit")
        tried = [v for v in versions if v.transformation in {t.id, target.id} and v.number not in in_lineage]
        outcomes = [_outcome(v, versions) for v in tried]
        failures = sum(v.status in _FAILED or v.status is Status.NOT_GENERAL for v in tried)
        repeated = failures >= REPEATED_FAILURES and not any(v.status.passed_here for v in tried)
        # this session's own measurement: every timed attempt slower than its parent beyond noise
        verdicts = [verdict for verdict in map(_verdict, tried, [versions] * len(tried)) if verdict]
        slower_here = bool(verdicts) and all(verdict == SLOWER for verdict in verdicts)
        if outcomes:
            reasons.append(f"tried in this session: {', '.join(outcomes)}"
                           + ("; ranked after the untried texts" if repeated else "")
                           + ("; slower here, so it ranks below the texts not measured slower" if slower_here
                              and not slower else ""))
        slower = slower or slower_here
        after = _unique(names.get(a, a) for a in target.after if a in exists or a in done | by_feature)
        steps = _steps_away(catalog, target.id, done | by_feature, exists)
        tuned_out = "tuning" in target.tags and _searched_in_full(chain[-1])
        if tuned_out:  # tune would return its record: only other values, in a new version, can be searched
            reasons.append(f"v{chain[-1].number}'s parameters were already searched in full (tune): ranked after "
                           "the others; it applies only by declaring other values or parameters in a new version")
        later[target.id] = (repeated or tuned_out, steps, slower or bool(unfit))
        ranked[target.id] = Suggestion(id=target.id, title=target.title, score=round(score, 2),
                                       why="; ".join(reasons) or target.summary,
                                       tried=outcomes, first=after[:2] if steps else [])
    order = sorted(ranked.values(), key=lambda s: (*later[s.id], -s.score, s.id))
    # every ready text measured slower here or unfit for the device, the rest waiting on one of them: say so
    ready = [s for s in order if not later[s.id][0] and not later[s.id][1]]
    if not order:
        note = _nothing_left(catalog, listed, backend, session.problem, dtype, descriptor, problem.traits,
                             _tune_hint(chain[-1].source, session.runs, _searched_in_full(chain[-1])))
    elif ready and all(later[s.id][2] for s in ready):
        note = (f"no text listed is expected to beat v{chain[-1].number} on this device: those ready to apply are "
                "measured slower here or do not fit it, and the others need one of them first; "
                + (_tune_hint(chain[-1].source, session.runs, _searched_in_full(chain[-1])) or "time one")
                + ", or submit an idea of your own")
    else:
        note = None
    return Suggestions(session_id=session_id, head=session.head, best=best,
                       ranked_from=basis if basis != session.head else None, backend=backend, dtype=dtype,
                       device=device.name or session.device, applied=applied,
                       features=sorted(features), suggestions=order[:limit],
                       behind_best=_behind_best(versions, chain[-1], best), note=note)


def _unique(items: Any) -> list[str]:
    """The items once each, in their first order."""
    return list(dict.fromkeys(items))


def _applied_elsewhere(catalog: Catalog, versions: list[VersionRow], in_lineage: set[int],
                       names: dict[str, str]) -> dict[str, tuple[int, str]]:
    """The texts (as the session names them) that a passing version outside the head's lineage applied: text ->
    (that version, its outcome). A prerequisite applied there is not "not done yet": the head just does not build
    on it (an agent that reverted to v0 was told to apply a text it had applied twice)."""
    found: dict[str, tuple[int, str]] = {}
    for v in sorted(versions, key=lambda v: v.number, reverse=True):  # the latest attempt speaks
        if v.transformation and v.number not in in_lineage and v.status.passed_here:
            name = names.get(v.transformation, v.transformation)
            said = _outcome(v, versions).removeprefix(f"v{v.number} ")  # "0.98× its parent (within noise)"
            found.setdefault(name, (v.number, re.sub(r" \((.*)\)$", r", \1", said)))
    return found


# On a CPU device (lavapipe) a workgroup's threads run in turn on a few SIMD lanes and shared memory is ordinary
# cached memory: a text whose whole gain is one of these GPU mechanisms has nothing to act on there.
CPU_MOOT = {"bank-conflicts": "a CPU's shared memory has no banks to conflict",
            "latency-hiding": "a CPU has no other resident warps to hide memory latency behind",
            "subgroup": "a CPU's subgroups are a few SIMD lanes, not the 32- or 64-lane waves this text is about"}
# Backends without launch bounds or __restrict__: there, unrolling constant-trip loops is all an unrolling text does.
NO_LAUNCH_BOUNDS = {"hlsl"}


def _unfit(t: Transformation, device: Device, backend: str, source: str) -> str | None:
    """Why a text's gain does not fit the device or the head, in words; None where it may."""
    if getattr(device, "is_cpu", False):
        moot = [why for tag, why in CPU_MOOT.items() if tag in t.tags]
        if moot:
            return f"on this CPU device, {moot[0]}"
    if "unrolling" in t.tags and backend in NO_LAUNCH_BOUNDS and not unrollable_loops(source):
        return ("the head has no loop with a compile-time trip count left to unroll (its loops run to sizes known "
                f"at run time or are unrolled already), and {backend} has no launch bounds")
    return None


def _behind_best(versions: list[VersionRow], ranked: VersionRow, best: int | None) -> str | None:
    """A line where the ranked version is slower than the best beyond noise: an agent kept building on a head at
    0.26x of v0, every suggestion following it, with nothing saying so."""
    top = next((v for v in versions if v.number == best), None)
    # the records, or the pair where the ranked version's submission re-timed the best back to back: a revert advised
    # on v2's lucky 3.6 ms would have dropped a change that, timed back to back, made no difference (agent44b #41)
    theirs, mine = (top.beside(top.timing, ranked.number), ranked.timing) if top is not None else (None, None)
    if top is None or top.number == ranked.number or not (theirs and mine):
        return None
    if change(mine, theirs) != SLOWER or not mine.median_ms:
        return None
    ratio = theirs.median_ms / mine.median_ms
    return (f"v{ranked.number}, which these suggestions build on, runs at {ratio:.2g}x the speed of the best version "
            f"v{top.number} (slower beyond noise); to build on v{top.number} instead, revert to it first "
            f"(revert(version={top.number})), or pass parent={top.number} to submit_kernel")


def _what_is_done(catalog: Catalog, chain: list[VersionRow], backend: str, descriptor: DeviceDescriptor, dtype: str,
                  problem: Problem) -> tuple[dict[str, Any], set[str], dict[str, str]]:
    """The last version's code features, the texts its lineage did (each as the session resolved it, and what that
    one extends), and the lineage labels whose work its code does not show (not done)."""
    features = source_features(chain[-1].source, problem)
    done: set[str] = set()
    unshown: dict[str, str] = {}
    for name in (v.transformation for v in chain if v.transformation):
        cursor = catalog.resolve(name, backend, descriptor, dtype) if name in catalog else None
        if LABEL_SHOWS.get(cursor.id if cursor else name, "") not in ("", *features):
            unshown[cursor.id if cursor else name] = LABEL_SHOWS[cursor.id if cursor else name]
            continue
        while cursor is not None and cursor.id not in done:
            done.add(cursor.id)
            cursor = catalog.get(cursor.extends) if cursor.extends in catalog else None
        done.add(name)
    return features, done, unshown


def missing_prerequisites(catalog: Catalog, session: SessionRow, versions: list[VersionRow], base: int,
                          problem: Problem, device: Device, text_id: str) -> list[tuple[str, str]]:
    """The texts (id, title) that `text_id` usually comes after, where version `base` did none of them (by its
    lineage or its code): its brief says so, since its 'Keep unchanged' items may assume them."""
    if text_id not in catalog:
        return []
    descriptor = DeviceDescriptor.of(device)
    chain = lineage(versions, base)
    features, done, _ = _what_is_done(catalog, chain, session.backend, descriptor, session.dtype, problem)
    done |= {id for covers in features.values() for id in covers}
    listed = catalog.list(backend=session.backend, device=descriptor, problem=session.problem, dtype=session.dtype,
                          traits=problem.traits)
    exists = {t.id for t in listed}
    after = [a for a in catalog.get(text_id).after if a in exists]
    if not after or set(after) & done:
        return []
    return [(a, catalog.get(a).title) for a in after]


def _steps_away(catalog: Catalog, id: str, done: set[str], exists: set[str], seen: frozenset[str] = frozenset()) -> int:
    """How many texts the head needs before `id` (its `after` chain among the session's texts): 0 when it has no
    prerequisite or the head did one, so a text two steps away ranks after one whose prerequisite is ready."""
    t = catalog.get(id) if id in catalog else None
    after = [a for a in (t.after if t else []) if a in exists or a in done]
    if not after or set(after) & done:
        return 0
    nearer = [_steps_away(catalog, a, done, exists, seen | {id}) for a in after if a not in seen | {id}]
    return 1 + min(nearer, default=0)


def _as_submitted(v: VersionRow, versions: list[VersionRow]) -> tuple[Timing, Timing] | None:
    """A passing version's time as submitted and its parent's as it stood then, where both are known."""
    if not v.status.passed_here:
        return None
    parent = next((p for p in versions if p.number == v.parent), None)
    # the parent's re-timing where this submission took one back to back (records.Retimed), else the records
    own = v.submitted_timing
    theirs = parent.beside(parent.timing_at(v.created_at), v.number) if parent is not None else None
    return (own, theirs) if own is not None and theirs is not None and own.median_ms and theirs.median_ms else None


def _verdict(v: VersionRow, versions: list[VersionRow]) -> str | None:
    """noise.change of a passing attempt against its parent, as its submission judged it; None where not timed."""
    pair = _as_submitted(v, versions)
    return change(*pair) if pair else None


def _outcome(v: VersionRow, versions: list[VersionRow]) -> str:
    """One attempt in words: v5 failed (the verdict's check), wrong at other sizes, its speed over its parent with
    the noise verdict, compiled (not timed). The speed is the one its submission reported, like for like: the
    version's time as submitted (never a later tune's) against its parent's as it stood then, judged by
    noise.change as submit_kernel judged it (a 1.08x within noise was called "1.1x (faster)", and a tuned child
    against its untuned parent 1.4x where the submission had said 0.41x)."""
    if v.status in _FAILED:
        check = v.validation.check if v.validation is not None and not v.validation.passed else None
        return f"v{v.number} failed ({check or v.failure or v.status.value})"
    if v.status is Status.NOT_GENERAL:
        return f"v{v.number} failed (wrong at other sizes: generality)"
    pair = _as_submitted(v, versions)
    if pair is not None:
        own, theirs = pair
        tuned = " as submitted" if v.submitted_timing != v.timing else ""  # a tune replaced its time since
        return (f"v{v.number} {theirs.median_ms / own.median_ms:.3g}× its parent{tuned} "
                f"({change(own, theirs)})")
    if v.status.passed_here:
        return f"v{v.number} passed" + (" (its time as submitted is not known)" if v.timing else " (not timed)")
    return f"v{v.number} {v.status.value}" + (" (not timed)" if v.status is Status.COMPILED else "")


_PARAMS_LINE = re.compile(r"^\s*//\s*peak\s*:\s*params\b", re.MULTILINE)


def _searched_in_full(v: VersionRow) -> bool:
    """tune already measured every valid configuration of this version's space (tuning/tune.py reuses that)."""
    return v.tuning is not None and v.tuning.complete


def _tune_hint(source: str, runs: bool, searched: bool = False) -> str:
    """What tune can do for the head: search its parameters, or first declare some; nothing without a device (tune
    times configurations), nor where its space was searched in full."""
    if not runs:
        return ""
    if searched:
        return "its parameters were searched in full: declare other values in a new version to tune further"
    if _PARAMS_LINE.search(source):
        return "tune its parameters (tune)"
    return "declare tuning parameters (`// peak: params BLOCK=[128, 256]`) and tune them"


def _nothing_left(catalog: Catalog, listed: list[Transformation], backend: str, problem: str, dtype: str,
                  device: DeviceDescriptor | None, traits: tuple[str, ...] = (), tune: str = "") -> str:
    """No suggestion because every text is done, or because none was ever written for this backend (an HLSL
    attention session was told that nothing was "left"). `tune`: what tune can do for the head (_tune_hint)."""
    if not listed:
        return catalog.empty_note(backend, problem, dtype=dtype, device=device, traits=traits) + \
            (f"; or {tune}" if tune else "")
    return (f"every {problem} text for {backend} is in the head's lineage or visible in its source: "
            + (f"{tune}, " if tune else "") + "list_transformations for the whole catalog, or submit an idea of "
            "your own")


def _score(t: Transformation, done: set[str], hinted: set[str], features: dict[str, Any], dtype: str,
           sizes: dict[str, int], device: Device, problem: Problem, exists: set[str], *,
           names: dict[str, str] | None = None,
           elsewhere: dict[str, tuple[int, str]] | None = None) -> tuple[float, list[str]]:
    """`names`: a text id -> the session backend's own text for it; `elsewhere`: texts a version outside the head's
    lineage applied (_applied_elsewhere)."""
    score, reasons = 0.0, []
    names, elsewhere = names or {}, elsewhere or {}
    after = [a for a in t.after if a in exists or a in done]  # a CUDA-only predecessor is no hint for HLSL
    followed = [a for a in after if a in done]
    shown = _unique(names.get(a, a) for a in after)
    if followed:
        score += 2.0 + 0.5 * (len(followed) - 1)
        reasons.append(f"usually follows {', '.join(_unique(names.get(a, a) for a in followed))}, which the head "
                       "has")
    elif after:  # ranked after the texts whose prerequisites are met (suggest_next)
        score -= 1.0
        there = next((a for a in shown if a in elsewhere), None)
        if there is not None:
            number, outcome = elsewhere[there]
            reasons.append(f"usually comes after {there}, which this session applied outside the head's lineage, "
                           f"in v{number} ({outcome}): pass parent={number} to build on v{number}, or apply {there} "
                           "to the head first")
        else:
            reasons.append(f"usually comes after {' or '.join(shown[:2])}, which the head has not done: apply "
                           f"{'one of them' if len(shown) > 1 else 'it'} first")
    if t.id in hinted:
        score += 1.5
        reasons.append("named as the next step by a transformation already applied")
    if "basics" in t.tags and SHARED_TILES not in features:
        score += 4.0 if "tiling" in t.tags else 2.0
        reasons.append("the head stages no tiles in shared memory: " +
                       ("the first large step" if "tiling" in t.tags else "a basic step"))
    if t.devices:
        score += 1.0
        reasons.append(f"written for this device ({device.name or device.arch})")
    if TENSOR_TAGS & set(t.tags):
        if dtype in ("f16", "bf16"):
            score += 2.5
            reasons.append(f"{dtype} inputs: tensor cores are the fast path")
        elif dtype in t.dtypes:  # written for this dtype: three-xtf32 keeps f32's accuracy on tensor cores
            reasons.append(f"tensor cores for {dtype} inputs at {dtype}'s accuracy (validate it)")
        else:
            score -= 3.0
            reasons.append("f32 session: TF32 tensor cores miss the 1e-5 tolerance unless split 3x")
    own, why = problem.suggestion_score(t.tags, sizes, device.sm_count)
    return score + own, reasons + why
