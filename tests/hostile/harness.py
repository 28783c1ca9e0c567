"""Shared by tests/test_hostile_*.py and tools/hostile_bench.py: load the manifest, submit its kernels through an MCP
client, and judge each version report against the expectation.

Everything here talks to the server only through MCP tool calls (`start_session`, `submit_kernel`, `get_version`), so
the same code drives an in-process client (tests) and a `peak-mcp serve` subprocess over stdio (the bench).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from peak_mcp.backends.hip_portability import hip_spelling

HOSTILE = Path(__file__).resolve().parent
ROOT = HOSTILE.parent.parent
MANIFEST = HOSTILE / "manifest.yaml"
GOOD = {"cuda": ROOT / "examples" / "matmul" / "cuda" / "smem_tiled.cu",
        "hip": ROOT / "examples" / "matmul" / "hip" / "smem_tiled.hip",
        "hlsl": ROOT / "examples" / "matmul" / "hlsl" / "tiled_groupshared.hlsl"}
# The row problems' good kernel after a fault: a shipped example (f32 as written; HLSL's NT takes its default).
GOOD_ROWS = {"cuda": "cuda/2_warp_shuffle.cu", "hip": "hip/2_warp_shuffle.hip", "hlsl": "hlsl/1_groupshared.hlsl"}
GOOD_CONV = {"cuda": "cuda/1_implicit_gemm.cu", "hip": "cuda/1_implicit_gemm.cu", "hlsl": "hlsl/1_k_blocked.hlsl"}
UNALIGNED = {"M": 100, "N": 77, "K": 53}
TILE = 32  # sizes that are multiples of this count as "aligned" for the `unaligned` override
ROW_PROBLEMS = ("softmax", "rmsnorm", "row_sum")
ATTENTION = ("attention", "attention_causal")
CONV = {"R": 3, "S": 3, "STRIDE": 1, "PAD": 1, "DIL": 1}  # conv2d's parameters in its hostile sessions: a 3x3 layer
SYMBOLS = {"matmul": ("M", "N", "K"), **dict.fromkeys(ROW_PROBLEMS, ("ROWS", "COLS")),
           "conv2d": ("N", "H", "W", "C", "K", *CONV), **dict.fromkeys(ATTENTION, ("B", "H", "S", "D"))}
# The sizes of the sessions entries are submitted to, per problem and backend (HIP as CUDA): an aligned size (every
# symbol a multiple of TILE) and an unaligned one. Lavapipe gets the small ones: it runs on two CPU cores in CI.
# The row problems' unaligned sizes differ on purpose: 64x100 (HLSL) keeps COLS a multiple of 4, 100x77 (CUDA) not.
SESSION_SIZES = {
    "matmul": {"hlsl": {"aligned": {"M": 128, "N": 128, "K": 128}, "unaligned": UNALIGNED},
               "cuda": {"aligned": {"M": 256, "N": 256, "K": 256}, "unaligned": UNALIGNED}},
    **{problem: {"hlsl": {"aligned": {"ROWS": 64, "COLS": 128}, "unaligned": {"ROWS": 64, "COLS": 100}},
                 "cuda": {"aligned": {"ROWS": 256, "COLS": 1024}, "unaligned": {"ROWS": 100, "COLS": 77}}}
       for problem in ROW_PROBLEMS},
    # conv2d: "aligned" channels (C, K multiples of 32 as tiles assume) and odd ones; a 3x3 filter with padding 1.
    "conv2d": {"hlsl": {"aligned": {"N": 2, "H": 8, "W": 8, "C": 32, "K": 32, **CONV},
                        "unaligned": {"N": 2, "H": 9, "W": 7, "C": 5, "K": 7, **CONV}},
               "cuda": {"aligned": {"N": 4, "H": 16, "W": 16, "C": 64, "K": 64, **CONV},
                        "unaligned": {"N": 3, "H": 13, "W": 11, "C": 37, "K": 29, **CONV}}},
    # Attention (B, H, S, D): D=128 where the examples' tensor-core path runs; 37 and 100 keys end mid-tile.
    **{problem: {"hlsl": {"aligned": {"B": 1, "H": 2, "S": 64, "D": 32},
                          "unaligned": {"B": 2, "H": 3, "S": 37, "D": 20}},
                 "cuda": {"aligned": {"B": 2, "H": 4, "S": 256, "D": 128},
                          "unaligned": {"B": 1, "H": 3, "S": 100, "D": 77}}}
       for problem in ATTENTION}}
# What a session on lavapipe declares so that its sampled sizes stay in reach of two CPU cores: attention's naive
# kernel (a thread per output, S x D work each) runs past the hostile tests' 3 s fence timeout there at sampled sizes
# such as 25 x 39 x 27 x 45. Still sampled: 1x1x1x1, 7x5x3x6, S = 67 or 40 (mid-tile), S = 133.
SESSION_CONSTRAINTS = {("hlsl", problem): ["B * H * S * D <= 65536"] for problem in ATTENTION}


def session_sizes(problem: str, backend: str) -> dict[str, dict[str, int]]:
    """{'aligned': sizes, 'unaligned': sizes} for a session of `problem` on `backend`."""
    return SESSION_SIZES[problem]["hlsl" if backend == "hlsl" else "cuda"]


def good_kernel(problem: str, backend: str) -> Path:
    """A kernel that must benchmark in a session of `problem` (submitted after a fault)."""
    if problem == "conv2d":
        return ROOT / "examples" / "conv2d" / GOOD_CONV[backend]
    return GOOD[backend] if problem == "matmul" else ROOT / "examples" / problem / GOOD_ROWS[backend]


def size_label(sizes: dict[str, int]) -> str:
    return "x".join(str(v) for v in sizes.values())


@dataclass(frozen=True)
class Entry:
    cls: str
    file: str
    backend: str
    status: tuple[str, ...]
    failure: tuple[str | None, ...]
    generality_fails: bool = False
    unaligned: dict[str, Any] | None = None
    fault: bool = False
    note: str = ""
    problem: str = "matmul"
    gap: str = ""  # the server is known to miss this one: what it answers instead (tests: a strict xfail)

    @property
    def path(self) -> Path:
        return HOSTILE / self.file

    @property
    def name(self) -> str:
        return Path(self.file).stem

    def source(self) -> str:
        """The kernel as submitted: a HIP twin is its CUDA kernel with HIP's headers in place of CUDA's, which is
        all that kernel code in CUDA's spelling needs to be HIP."""
        text = self.path.read_text()
        return hip_spelling(text) if self.backend == "hip" else text

    def expect(self, sizes: dict[str, int]) -> dict[str, Any]:
        """The expectation at these sizes: {status, failure, generality_fails} (tuples of acceptable values)."""
        base = {"status": self.status, "failure": self.failure, "generality_fails": self.generality_fails}
        if self.unaligned and not aligned(sizes):
            base = {"status": _tuple(self.unaligned.get("status", self.status)),
                    "failure": _tuple(self.unaligned.get("failure")),
                    "generality_fails": bool(self.unaligned.get("generality_fails", False))}
        return base


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, list | tuple) else (value,)


# The symbols a problem's kernels tile, where not all of them: a convolution's tiles are over its channels,
# attention's over the sequence and head dimension (batch and heads are a grid axis each).
TILED = {frozenset(SYMBOLS["conv2d"]): ("C", "K"), frozenset(SYMBOLS["attention"]): ("S", "D")}


def aligned(sizes: dict[str, int]) -> bool:
    tiled = TILED.get(frozenset(sizes), tuple(sizes))
    return all(sizes[name] % TILE == 0 for name in tiled)


def load_manifest(backend: str | None = None, problem: str | None = "matmul") -> list[Entry]:
    """The entries for `backend` (every backend: None) and `problem` (every problem: None)."""
    raw = yaml.safe_load(MANIFEST.read_text())["entries"]
    entries = []
    for item in raw:
        known = {"class", "file", "backend", "status", "failure", "generality_fails", "unaligned", "fault", "note",
                 "problem", "gap"}
        unknown = set(item) - known
        if unknown:
            raise ValueError(f"manifest entry {item.get('file')}: unknown keys {sorted(unknown)}")
        entries.append(Entry(cls=item["class"], file=item["file"], backend=item["backend"],
                             status=_tuple(item["status"]), failure=_tuple(item.get("failure")),
                             generality_fails=bool(item.get("generality_fails", False)),
                             unaligned=item.get("unaligned"), fault=bool(item.get("fault", False)),
                             note=str(item.get("note", "")), problem=str(item.get("problem", "matmul")),
                             gap=str(item.get("gap", ""))))
    entries = [e for e in entries if problem is None or e.problem == problem]
    if backend == "hip":  # the CUDA kernels, as HIP: each must get the verdict its CUDA twin gets
        return [replace(e, backend="hip") for e in entries if e.backend == "cuda"]
    return [e for e in entries if backend is None or e.backend == backend]


def failure_matches(expected: tuple[str | None, ...], got: str | None) -> bool:
    for want in expected:
        if want is None:
            if got is None:
                return True
        elif want.endswith("*"):
            if got is not None and got.startswith(want[:-1]):
                return True
        elif got == want:
            return True
    return False


def describe(expect: dict[str, Any]) -> str:
    status = "|".join(expect["status"])
    failure = "|".join("-" if f is None else f for f in expect["failure"])
    text = status if failure == "-" else f"{status}/{failure}"
    return text + (" +generality_fails" if expect["generality_fails"] else "")


def judge(expect: dict[str, Any], report: dict[str, Any], head_before: int | None) -> list[str]:
    """Why the report does not meet the expectation (empty when it does)."""
    problems = []
    status, failure = report.get("status"), report.get("failure")
    if status not in expect["status"]:
        problems.append(f"status {status!r}, expected {'|'.join(expect['status'])}")
    if not failure_matches(expect["failure"], failure):
        problems.append(f"failure {failure!r}, expected {'|'.join(str(f) for f in expect['failure'])}")
    generality = report.get("generality")
    if expect["generality_fails"]:
        if not isinstance(generality, dict):
            problems.append("no generality report")
        elif generality.get("passed") is not False:
            problems.append(f"generality.passed is {generality.get('passed')!r}, expected False")
        if report.get("head") != head_before:
            problems.append(f"head moved to {report.get('head')} (was {head_before}) for a version without "
                            "generality")
    elif status not in ("benchmarked", "validated") and report.get("head") != head_before:
        problems.append(f"head moved to {report.get('head')} (was {head_before}) for a {status} version")
    return problems


def tagged(source: str, label: str) -> str:
    """A unique trailing comment, so no server-side cache keyed by source text can hand back another run's module
    (and its device globals)."""
    return source.rstrip("\n") + f"\n// hostile-run: {label}\n"


@dataclass
class Outcome:
    entry: Entry
    sizes: dict[str, int]
    expected: str
    status: str | None
    failure: str | None
    message: str
    seconds: float
    problems: list[str]
    generality: dict[str, Any] | None = None
    recovered: bool | None = None  # after a fault: did a good kernel benchmark next
    recovery_message: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems and self.recovered is not False

    @property
    def verdict(self) -> str:
        return f"{self.status}/{self.failure}" if self.failure else str(self.status)

    def why(self) -> str:
        parts = list(self.problems)
        if self.recovered is False:
            parts.append(f"the good kernel after it did not benchmark: {self.recovery_message[:300]}")
        return "; ".join(parts) + f" -- message: {self.message[:600]}"

    def as_dict(self) -> dict[str, Any]:
        return {"class": self.entry.cls, "file": self.entry.file, "backend": self.entry.backend,
                "sizes": self.sizes, "expected": self.expected, "status": self.status, "failure": self.failure,
                "ok": self.ok, "problems": self.problems, "recovered": self.recovered, "seconds": self.seconds,
                "generality": self.generality, "message": self.message}


async def _call(client: Any, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    if result.is_error:
        return {"status": "tool_error", "failure": "tool_error", "message": result.content[0].text}
    return result.structured_content or {}


async def start_session(client: Any, backend: str, sizes: dict[str, int], problem: str = "matmul") -> dict[str, Any]:
    constraints = SESSION_CONSTRAINTS.get((backend, problem))
    started = await client.call_tool("start_session", {"problem": problem, "backend": backend, "dtype": "f32",
                                                       "sizes": sizes, **({"constraints": constraints}
                                                                          if constraints else {})})
    if started.is_error:
        raise RuntimeError(f"start_session({problem}, {backend}, {sizes}) failed: {started.content[0].text}")
    session = started.structured_content
    if session["version_0"]["status"] != "benchmarked":
        raise RuntimeError(f"version 0 did not benchmark: {session['version_0']}")
    return session


async def run_entry(client: Any, session_id: str, entry: Entry, sizes: dict[str, int], label: str) -> Outcome:
    """Submit one hostile kernel (parent 0) and, after a fault, a good kernel; judge the report."""
    head_before = (await _call(client, "get_version", {"session_id": session_id})).get("report", {}).get("version")
    expect = entry.expect(sizes)
    t0 = time.perf_counter()
    report = await _call(client, "submit_kernel", {"session_id": session_id, "parent": 0,
                                                   "source": tagged(entry.source(), label)})
    seconds = time.perf_counter() - t0
    outcome = Outcome(entry=entry, sizes=dict(sizes), expected=describe(expect), status=report.get("status"),
                      failure=report.get("failure"), message=str(report.get("message", "")), seconds=seconds,
                      problems=judge(expect, report, head_before), generality=report.get("generality"))
    if entry.fault or report.get("status") == "error":
        good = await _call(client, "submit_kernel", {"session_id": session_id, "parent": 0,
                                                     "source": tagged(good_kernel(entry.problem,
                                                                                  entry.backend).read_text(),
                                                                      f"{label} recovery")})
        outcome.recovered = good.get("status") == "benchmarked"
        outcome.recovery_message = str(good.get("message", ""))
    return outcome


async def run_all(client: Any, backend: str, sizes: dict[str, int], entries: list[Entry],
                  progress: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """One session at `sizes`, every entry submitted to it in manifest order; the entries are of one problem."""
    problems = {e.problem for e in entries}
    if len(problems) > 1:
        raise ValueError(f"run_all takes the entries of one problem, not {sorted(problems)}")
    if not entries:
        return []
    session = await start_session(client, backend, sizes, entries[0].problem)
    outcomes = []
    for entry in entries:
        outcome = await run_entry(client, session["session_id"], entry, sizes, f"{entry.file} {size_label(sizes)}")
        outcomes.append(outcome)
        if progress:
            progress(outcome)
    return outcomes


def params(entries: list[Entry], suffix: str) -> list[Any]:
    """Entries as pytest parameters named by file; one with a known `gap` is a strict xfail (it starts failing the
    suite the day the server catches it, so the gap note goes)."""
    import pytest

    return [pytest.param(e, id=e.file.removesuffix(suffix),
                         marks=[pytest.mark.xfail(strict=True, reason=f"known server gap: {e.gap}")] if e.gap else [])
            for e in entries]


def markdown(outcomes: list[Outcome]) -> str:
    lines = ["| class | file | sizes | expected | verdict | ok | seconds |", "|---|---|---|---|---|---|---|"]
    for o in outcomes:
        sizes = size_label(o.sizes)
        verdict = o.verdict + ("" if o.generality is None else f" (generality {o.generality.get('passed')})")
        if o.recovered is not None:
            verdict += ", recovered" if o.recovered else ", NOT recovered"
        mark = "pass" if o.ok else "known gap" if o.entry.gap else "FAIL"
        lines.append(f"| {o.entry.cls} | {o.entry.file} | {sizes} | {o.expected} | {verdict} | {mark} | "
                     f"{o.seconds:.1f} |")
    return "\n".join(lines)


def by_problem(entries: list[Entry]) -> dict[str, list[Entry]]:
    """The entries grouped by problem, each group in manifest order."""
    groups: dict[str, list[Entry]] = {}
    for e in entries:
        groups.setdefault(e.problem, []).append(e)
    return groups


def run_in_process(data_dir: Path, backend: str, which: str, entries: list[Entry],
                   inactivity_s: float) -> dict[str, Outcome]:
    """Every entry through a real in-process MCP client on one fresh server: a session per problem at its
    `which` ('aligned' or 'unaligned') sizes (session_sizes); outcomes by file."""
    import anyio
    from mcp import Client

    from peak_mcp.api.app import build
    from peak_mcp.core.config import Settings

    settings = Settings(data_dir=data_dir)
    settings.benchmark_budget_s = 0.2
    settings.inactivity_timeout_s = inactivity_s

    async def go() -> list[Outcome]:
        server, service = build(settings)
        try:
            async with Client(server) as client:
                outcomes = []
                for problem, group in by_problem(entries).items():
                    outcomes += await run_all(client, backend, session_sizes(problem, backend)[which], group)
                return outcomes
        finally:
            service.close()

    return {o.entry.file: o for o in anyio.run(go)}
