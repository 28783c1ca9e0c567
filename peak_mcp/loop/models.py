"""Typed results of the domain layer; the MCP tools return them as structured content."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from peak_mcp.evaluation.configs import TuneReport
from peak_mcp.evaluation.phases import CompileInfo  # the stored compile record, shown as it is (log trimmed)
from peak_mcp.store.records import Status


class Missing(BaseModel):
    what: str
    why: str
    fix: str


class BackendStatus(BaseModel):
    backend: str
    usable: bool
    can_run: bool
    devices: list[dict[str, Any]] = Field(description="each device with every property its backend detects")
    compiler: dict[str, Any]
    missing: list[Missing]


class DoctorReport(BaseModel):
    version: str
    data_dir: str | None = Field(description="where sessions are stored; over MCP named from the server's home "
                                             "(~/...), null when elsewhere")
    backends: list[BackendStatus]
    catalog: dict[str, Any]
    workers: dict[str, Any]
    sandbox: str = Field(description="how compiles are confined: the OS sandbox and each compile's limits")


class ProblemInfo(BaseModel):
    name: str
    title: str
    sizes: list[str]
    default_sizes: dict[str, int]
    dtypes: list[str]
    backends: list[str]
    # per backend, for its first dtype; abi_by_dtype: its other dtypes'. Only in one problem's detail (list_problems
    # with problem=, define_problem); the listing of all problems leaves them out.
    abi: dict[str, str] = Field(default_factory=dict)
    abi_by_dtype: dict[str, dict[str, str]] = Field(default_factory=dict)
    dtypes_by_backend: dict[str, list[str]] = Field(default_factory=dict)
    source: str = "built-in"  # built-in, or the problem file's path
    naive: list[str] | None = None  # backends whose sessions start from a naive kernel, where not all do
    reference: str | None = None  # said only where the problem has no Python reference
    definition: str | None = None  # what it computes, in the problem's own words (Problem.definition)
    annotation: str | None = None  # how a launch line's values are written (core.launch.EXPRESSIONS), in the detail
    traits: list[str] = Field(default_factory=list)  # what kind of computation: the catalog texts it gets
    traits_guessed: bool = False  # not declared (the file has no TRAITS): probed or read from shapes, may be wrong
    traits_probed: bool = False  # ... from a probe of its Python reference (one input changed, which outputs move)


class VersionReport(BaseModel):
    session_id: str
    version: int
    parent: int | None
    origin: str
    transformation: str | None
    status: Status
    failure: str | None = Field(None, description="the first failing check or error kind")
    message: str
    compile: CompileInfo | None = None
    validation: dict[str, Any] | None = None
    performance: dict[str, Any] | None = None
    generality: dict[str, Any] | None = Field(
        None, description="validation at sampled other sizes: {passed, sizes_checked, failures: [{sizes, check, "
                          "message}]}; head moves only to versions that pass it unless asked otherwise")
    head: int | None
    best: int | None = None  # the fastest general version (server instructions)
    seconds: float | None = Field(None, description="wall time of this submission on the server")
    tuning: dict[str, Any] | None = Field(None, description="the last tune: strategy, configurations tried, the "
                                                         "best and the five fastest")
    phases: dict[str, float] = Field(default_factory=dict,
                                     description="seconds spent compiling, validating and benchmarking in the worker")


class Submission(VersionReport):
    note: str | None = Field(None, description="head and best after it")


class SessionInfo(BaseModel):
    session_id: str
    problem: str
    backend: str
    dtype: str
    sizes: dict[str, int]
    device: dict[str, Any] = Field(description="the device in brief (doctor lists every detected property)")
    head: int | None
    best: int | None = None  # the fastest general version (server instructions)
    versions: int
    baseline: dict[str, Any] | None
    label: str | None = None
    constraints: list[str] = Field(default_factory=list, description="size constraints kernels may assume")
    version_0: VersionReport | None = None
    note: str | None = None  # e.g. why the sizes are not the problem's defaults
    brief: str | None = None  # where there is no v0 yet: what to submit first, with the ABI
    abi: str | None = None  # this session's kernel contract, for its backend and dtype
    definition: str | None = None  # what the problem computes, in its own words (Problem.definition)
    rules: str | None = None  # what a kernel must know beyond the ABI here (loop/session_rules.py)


class SessionSummary(BaseModel):
    session_id: str
    label: str | None = None
    problem: str
    backend: str
    dtype: str
    sizes: dict[str, int]
    device: str
    head: int | None
    versions: int
    best: str | None = Field(None, description="the fastest general version, its median time and rate")


class SessionList(BaseModel):
    sessions: list[SessionSummary]
    total: int
    offset: int = 0


class ProblemList(BaseModel):
    problems: list[ProblemInfo]
    errors: list[dict[str, Any]] = Field(
        default_factory=list, description="the operator's problem files left out (level error) or shadowed "
                                          "(warning): file, line, message (a defined file's error goes only to the "
                                          "client that defines it)")


class CheckReport(BaseModel):
    session_id: str
    version: int
    sizes: dict[str, int]
    passed: bool
    validation: dict[str, Any]
    performance: dict[str, Any] | None = None
    baseline: dict[str, Any] | None = None
    scope: str | None = None  # what this check covered, and what it leaves to the version's submission report


class HistoryReport(BaseModel):
    session_id: str
    problem: str
    backend: str
    dtype: str
    sizes: dict[str, int]
    device: str
    head: int | None
    best: int | None = None  # the fastest general version (server instructions)
    baseline: dict[str, Any] | None
    rows: list[dict[str, Any]] = Field(description="one per version; over MCP without its empty (null) fields")
    table: str = Field("", description="the same rows as a markdown table: the history tool gives it as its text")


class VersionDetail(BaseModel):
    report: VersionReport
    source: str
    configuration: str | None = Field(None, description="for a source with tuning parameters: the configuration "
                                                        "its time is of, as the #define lines it was compiled with "
                                                        "(the params line's first values are only its defaults)")


class DiffReport(BaseModel):
    session_id: str
    a: int
    b: int
    diff: str


class ApplyStep(BaseModel):
    """One step of apply_transformation: either done (with the final report) or a brief for the LLM."""

    run_id: str
    session_id: str
    transformation: str
    resolved_transformation: str  # the catalog text the LLM is given
    note: str | None = Field(None, description="the specialization chosen, when not the text asked for")
    attempt: int
    max_attempts: int
    done: bool
    succeeded: bool = Field(False, description="the transformation was applied and the result passed its checks; "
                                               "says nothing of speed (see speed)")
    speed: str | None = Field(None, description="the result against its parent, once succeeded: 'faster beyond "
                                                "noise' (a success in get_transformation_stats), 'within noise' or "
                                                "'slower beyond noise'")
    brief: str | None = Field(None, description="the prompt to send to an LLM when not done (the text block "
                                                "has it too, after 'brief:')")
    system_prompt: str | None = None
    attempts: list[VersionReport] = Field(default_factory=list)
    result: int | None = Field(None, description="the version the run ended with (its report is the last of "
                                                "attempts)")
    message: str = ""


class TransformationSummary(BaseModel):
    id: str
    title: str
    backends: list[str]
    devices: list[str]
    tags: list[str]
    extends: str | None
    summary: str


class TransformationList(BaseModel):
    transformations: list[TransformationSummary]
    errors: list[dict[str, Any]] = Field(default_factory=list, description="catalog files that failed to load")
    note: str | None = Field(None, description="when nothing matches: which filter left it empty, and the texts "
                                                "the other backends have for the problem")


class TransformationText(BaseModel):
    id: str
    title: str
    backends: list[str]
    devices: list[str]
    traits: list[str] = Field(default_factory=list, description="the problem traits it applies to (any: every "
                              "problem); a session's problem gets the texts that share one of its traits")
    problems: list[str]
    tags: list[str]
    after: list[str]
    extends: str | None
    resolved_from: str | None = Field(None, description="the id asked for, when a specialization was chosen")
    body: str


class TuneAnswer(TuneReport):  # a tune report, with head and the best version after it

    head: int | None = None
    best_version: int | None = None  # the fastest general version (server instructions)
    # counted before `results` and `pruned` are cut to the answer's few: how many passed, failed, were pruned
    passed_count: int = 0
    failed_count: int = 0
    pruned_count: int = 0


class StatsReport(BaseModel):
    transformations: list[dict[str, Any]]
    # what the figures cover: every session in this data directory, or the one named by session_id
    scope: str = ""
    session_id: str | None = None
    sessions: int = 0  # sessions counted (all in the data dir, or 1)
    sessions_with_attempts: int = 0
