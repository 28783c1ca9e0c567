"""suggest_next: transformations ranked for a session's head, each with one line of why.

The ranking reads only what is recorded: which transformations the head's lineage already went through, what its
source visibly has (shared memory, vector loads, tensor-core instructions ...), the catalog's order hints (`after`:
what a text usually follows, among the texts that exist for the session; the "Expected effect" section naming next
steps), the session's backend, problem, dtype, device and sizes, and a text's own `measured` speeds: a text measured
slower than its parent on the session's device ranks after every text that was not. Only texts that apply to the
session are proposed. It is a heuristic for where to look next, not a prediction of speed.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, Field

from peak_mcp.catalog.transformations import Catalog, DeviceDescriptor, Transformation
from peak_mcp.core.devices import Device
from peak_mcp.core.errors import InvalidInput
from peak_mcp.problems.base import Problem
from peak_mcp.problems.shipped import get_problem
from peak_mcp.store.records import SessionRow, Status, VersionRow

# Source features, and the transformations whose work a feature shows is already done.
FEATURES: dict[str, tuple[str, tuple[str, ...]]] = {
    "shared memory": (r"__shared__|\bgroupshared\b", ("shared-memory-tiling", "hlsl-groupshared-tiling",
                                                      "coalesced-access")),
    "register micro-tile (2-D)": (r"\bacc\s*\[[^\]]+\]\s*\[|\bc[0-7][0-7]\b", ("register-blocking-2d",
                                                                              "register-blocking-1d")),
    "register micro-tile (1-D)": (r"\bacc\s*\[", ("register-blocking-1d",)),
    "128-bit vectors": (r"\bfloat4\b|\buint4\b|\.Load4\s*\(|Store4\s*\(", ("vectorized-loads",
                                                                        "vectorized-row-access")),
    "cp.async": (r"cp\.async|__pipeline_memcpy_async|cuda::memcpy_async", ("cuda-cp-async", "double-buffering")),
    "WMMA": (r"\bwmma::", ("tensor-cores",)),
    "mma.sync": (r"mma\.sync", ("mma-sync-ptx", "tensor-cores")),
    "wgmma": (r"wgmma\.", ("hopper-wgmma", "mma-sync-ptx", "tensor-cores")),
    "MFMA": (r"__builtin_amdgcn_mfma", ("amd-mfma", "tensor-cores")),
    "__launch_bounds__": (r"__launch_bounds__", ("loop-unrolling-and-launch-bounds",)),
    "clusters": (r"__cluster_dims__|cluster\.sync|cluster_ctarank", ("thread-block-clusters",)),
    "split K": (r"\bsplit_?k\b|\bSPLIT_?K\b|\bsplitK\b", ("split-k",)),
    "grouped block order": (r"\bGROUP_M\b", ("grid-rasterization",)),
    "wave intrinsics": (r"\bWave(ReadLaneAt|ActiveSum|GetLaneIndex|GetLaneCount)\b", ("hlsl-wave-tiling",)),
    "16-bit packed reads": (r"\bf16tof32\b", ("hlsl-16bit-types",)),
    # the reductions of row problems (softmax, norms, sums)
    "warp shuffles": (r"__shfl(_xor|_down|_up)?(_sync)?\s*\(", ("warp-shuffle-reduction",)),
    "a row per warp": (r"for\s*\([^;]*=\s*lane\b[^;]*;[^;]*;[^)]*\+=\s*(32|64|warpSize|WARP)\b", ("row-per-warp",)),
    "wave reductions": (r"\bWaveActive(Sum|Max|Min|Product)\b", ("hlsl-wave-reduction",)),
    "threads striding over a row": (r"for\s*\([^;]*=\s*(threadIdx\.x|tid|gi|lane|lt\.x)\b[^;]*;[^;]*;[^)]*\+=\s*"
                                    r"(blockDim\.x|BLOCK|NT|THREADS)\b", ("row-per-block-reduction",)),
    # a running sum rescaled as its max grows: s * exp(m - m_new) (__expf, exp2f, exp2 and expf alike)
    "online rescaling": (r"\*=?\s*(__)?exp2?f?\s*\(\s*\(?\s*[A-Za-z_]\w*\s*-\s*[A-Za-z_]\w*\s*\)",
                         ("online-softmax",)),
    "rows strided over the grid": (r"\+=\s*(gridDim\.x|GRID)\b", ("persistent-rows",)),
    "cache-eviction hints": (r"__ldcs|__stcs|L2::cache_hint|L1::no_allocate|__builtin_nontemporal_(?:load|store)",
                             ("cache-eviction-hints",)),
}
_DOUBLE_BUFFER = re.compile(r"(__shared__|groupshared)[^;]*\w+\s*\[\s*(2|STAGES|NSTAGES)\s*\]\s*\[")
_NEXT_STEP = re.compile(r"`([a-z0-9]+(?:-[a-z0-9]+)+)`")
TENSOR_TAGS = {"tensor-cores", "mfma", "wgmma", "mma"}


class Suggestion(BaseModel):
    id: str = Field(description="pass this to apply_transformation")
    title: str
    score: float
    why: str


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
    note: str | None = Field(None, description="when there is no suggestion: why")


def source_features(source: str, problem: Problem | None = None) -> dict[str, tuple[str, ...]]:
    """Feature name -> the transformations it stands for, for the features found in a kernel source: the generic
    ones, and the problem's own (`Problem.source_hints`; matmul's by default)."""
    found = {name: covers for name, (pattern, covers) in FEATURES.items() if re.search(pattern, source)}
    if _DOUBLE_BUFFER.search(source):
        found["multi-buffered shared tiles"] = ("double-buffering",)
    found.update((problem or get_problem("matmul")).source_hints(source))
    if "register micro-tile (2-D)" in found:
        found.pop("register micro-tile (1-D)", None)
    return found


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
    features = source_features(chain[-1].source, problem)

    done: set[str] = set()
    for name in applied:  # the text the session resolved it to, and whatever that one extends, are done
        cursor = catalog.resolve(name, backend, descriptor, dtype) if name in catalog else None
        while cursor is not None and cursor.id not in done:
            done.add(cursor.id)
            cursor = catalog.get(cursor.extends) if cursor.extends in catalog else None
        done.add(name)
    by_feature = {id for covers in features.values() for id in covers}
    hinted = {step for name in done for step in _next_steps(catalog.get(name))}

    ranked: dict[str, Suggestion] = {}
    slower: set[str] = set()  # measured slower than the parent on this device: ranked after the rest
    listed = catalog.list(backend=backend, device=descriptor, problem=session.problem, dtype=dtype,
                          traits=problem.traits)
    exists = {t.id for t in listed}  # an `after` naming a text that does not exist for the session is no hint
    for t in listed:
        target = catalog.resolve(t.id, backend, descriptor, dtype)
        if target.id in ranked or {t.id, target.id} & (done | by_feature):
            continue
        if not (target.for_backend(backend) and target.for_dtype(dtype)
                and target.for_problem(session.problem, problem.traits)):
            continue
        score, reasons = _score(target, done | by_feature, hinted, features, dtype, sizes, device, problem, exists)
        measured = target.measured_on(descriptor)
        if measured and measured[1] < 1:
            slower.add(target.id)
            reasons.append(f"its text measured {measured[1]:g}× its parent on {measured[0]} (this device): ranked "
                           "after the texts not measured slower here; time it")
        ranked[target.id] = Suggestion(id=target.id, title=target.title, score=round(score, 2),
                                       why="; ".join(reasons) or target.summary)
    order = sorted(ranked.values(), key=lambda s: (s.id in slower, -s.score, s.id))
    return Suggestions(session_id=session_id, head=session.head, best=best,
                       ranked_from=basis if basis != session.head else None, backend=backend, dtype=dtype,
                       device=device.name or session.device, applied=applied,
                       features=sorted(features), suggestions=order[:limit],
                       note=None if order else _nothing_left(catalog, listed, backend, session.problem, dtype,
                                                             descriptor, problem.traits,
                                                             _tune_hint(chain[-1].source, session.runs)))


_PARAMS_LINE = re.compile(r"^\s*//\s*peak\s*:\s*params\b", re.MULTILINE)


def _tune_hint(source: str, runs: bool) -> str:
    """What tune can do for the head: search its parameters, or first declare some; nothing without a device (tune
    times configurations)."""
    if not runs:
        return ""
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
           sizes: dict[str, int], device: Device, problem: Problem, exists: set[str]) -> tuple[float, list[str]]:
    score, reasons = 0.0, []
    after = [a for a in t.after if a in exists or a in done]  # a CUDA-only predecessor is no hint for HLSL
    followed = [a for a in after if a in done]
    if followed:
        score += 2.0 + 0.5 * (len(followed) - 1)
        reasons.append(f"usually follows {', '.join(followed)}, which the head has")
    elif after:
        score -= 1.0
        reasons.append(f"usually comes after {' or '.join(after[:2])}, not done yet")
    if t.id in hinted:
        score += 1.5
        reasons.append("named as the next step by a transformation already applied")
    if "basics" in t.tags and "shared memory" not in features:
        score += 4.0 if "tiling" in t.tags else 2.0
        reasons.append("the head stages nothing in shared memory: " +
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
