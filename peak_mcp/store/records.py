"""Typed records shared by the service, the store and the reports: a version's status, the stored rows, and what
one evaluation came to (the version fields it sets). The JSON columns hold phases.py's records."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from peak_mcp.evaluation.configs import TuneReport
from peak_mcp.evaluation.phases import Baseline, CompileInfo, Generality, Timing, Verdict


class Status(StrEnum):
    """A version's state. A StrEnum, so rows written as plain strings by earlier releases read back unchanged."""

    PENDING = "pending"
    INVALID_ANNOTATION = "invalid_annotation"
    INVALID_REPLY = "invalid_reply"
    COMPILE_ERROR = "compile_error"
    FAILED = "failed"
    ERROR = "error"
    COMPILED = "compiled"
    VALIDATED = "validated"
    BENCHMARKED = "benchmarked"
    NOT_GENERAL = "not_general"  # right (and timed) at the session's sizes, wrong at sampled other sizes

    @property
    def passed(self) -> bool:
        """A success: validated at the session's sizes (and timed, for benchmarked) and at the sampled other sizes
        (or none could be sampled)."""
        return self in (Status.VALIDATED, Status.BENCHMARKED)

    @property
    def passed_here(self) -> bool:
        """Validated at the session's sizes, general or not: what a specialized kernel accepted by the agent is."""
        return self.passed or self is Status.NOT_GENERAL

    @property
    def usable(self) -> bool:
        """As far as a version can get: passed, or compiled where nothing can run (an apply run ends on it). Head
        moves only to passed versions; one that only compiled is no evidence (an empty kernel compiles)."""
        return self.passed or self is Status.COMPILED


class SessionRow(BaseModel):
    """A session as stored."""

    id: str
    problem: str
    backend: str
    dtype: str
    sizes: dict[str, int]
    device: str  # its name
    device_index: int  # -1: compile-only
    head: int | None = None
    baseline: Baseline | None = None
    created_at: float
    label: str | None = None
    constraints: list[str] = Field(default_factory=list)
    device_info: dict[str, Any] | None = None  # the described device (devices.Device), for sessions since migration 3
    problem_sha256: str | None = None  # a problem file's sha256 when the session started (None: built-in, or older)

    @field_validator("constraints", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value  # rows from before migration 2

    @property
    def runs(self) -> bool:
        """A device is there: versions are validated and timed, not only compiled."""
        return self.device_index >= 0

    @property
    def vendor_ms(self) -> float | None:
        return self.baseline.median_ms if self.baseline and self.baseline.available else None


class Timeline(BaseModel):
    """Where one submission's seconds went (loop/timeline.py): the phases' sums, and its first steps as stamped
    (seconds since it was admitted, the progress line)."""

    total_s: float
    phases: dict[str, float] = {}
    steps: list[tuple[float, str]] = []


class Retimed(BaseModel):
    """A version's configuration timed again in full back to back with another version (`beside`: a child whose
    submission re-timed it), kept beside the submit-time record (`timing`), which it never replaces. Only that pair
    reads it: a noisy CPU device's one lucky run (3.6 ms; its re-runs 6.7 and 6.9 ms) made four verdicts wrong, and
    so did a re-timing read against records taken at other moments (agent45: one loaded benchmark run of v0 turned a
    2-3x slower child into 'noise')."""

    timing: Timing
    at: float
    by: str  # what timed it, in words: "submit_kernel of v3, back to back"
    beside: int | None = None  # the version timed back to back with it


class VersionRow(BaseModel):
    """A version as stored: its source, its state and what each phase found."""

    session_id: str
    number: int
    parent: int | None = None
    origin: str  # naive | reference (start_session's reference_kernel) | submit | apply
    transformation: str | None = None
    apply_id: str | None = None
    attempt: int | None = None
    source: str
    status: Status
    failure: str | None = None
    message: str | None = None
    compile: CompileInfo | None = None
    validation: Verdict | None = None
    timing: Timing | None = None
    generality: Generality | None = None
    tuning: TuneReport | None = None
    timeline: Timeline | None = None
    retimed: Retimed | None = None  # its re-timing beside a child's submission (None: never re-timed)
    created_at: float
    owner: str | None = None  # the lease of the server that recorded it (store.py); None before leases

    @model_validator(mode="after")
    def _general_or_not(self) -> VersionRow:
        """Rows from before `not_general` kept `benchmarked` when generality failed: they read as what they were."""
        if self.status.passed and self.generality is not None and self.generality.passed is False:
            self.status = Status.NOT_GENERAL
        return self

    @property
    def median_ms(self) -> float | None:
        return self.timing.median_ms if self.timing else None

    def beside(self, timing: Timing | None, other: int | None) -> Timing | None:
        """`timing` (a record of this version: its current, submitted or then timing) as compared with version
        `other`: its re-timing of the same configuration where that was timed back to back with `other`, else the
        record itself. Comparisons read a re-timing only against the version it was timed beside."""
        again = self.retimed
        if (again is not None and timing is not None and other is not None and again.beside == other
                and again.timing.params == timing.params):
            return again.timing
        return timing

    @property
    def submitted_timing(self) -> Timing | None:
        """The time the version's source earned as submitted, before any tune replaced `timing` with a tuned
        configuration's; None where a tune from before that was kept replaced it (not known)."""
        return self.tuning.submitted if self.tuning is not None else self.timing

    def timing_at(self, when: float) -> Timing | None:
        """The version's timing as it stood at `when` (a child's creation): its submitted one where a tune came
        later (a tune from before tunes were dated counts as earlier: its time is all there is)."""
        tuning = self.tuning
        if tuning is not None and tuning.at is not None and tuning.at > when and tuning.submitted is not None:
            return tuning.submitted
        return self.timing


class Outcome(BaseModel):
    """What evaluating a source came to: the version fields one evaluation sets (those left unset stay as stored)."""

    status: Status
    failure: str | None = None
    message: str | None = None
    compile: CompileInfo | None = None
    validation: Verdict | None = None
    timing: Timing | None = None
    generality: Generality | None = None

    def columns(self) -> dict[str, Any]:
        """The fields that were set, as Store.update_version takes them (records dumped to JSON objects)."""
        return self.model_dump(mode="json", exclude_unset=True)


class ApplyRunRow(BaseModel):
    """One apply_transformation run: the attempts an LLM makes at one transformation of one version."""

    id: str
    session_id: str
    transformation: str
    base_version: int
    instructions: str | None = None
    max_attempts: int
    attempts: int = 0
    state: str  # open | succeeded | exhausted
    result_version: int | None = None
    created_at: float
    resolved: str | None = None  # the catalog text given to the LLM (a specialization, or exactly the id asked for)
