"""Typed records shared by the service, the store and the reports: a version's status and the stored rows."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from peak_mcp.devices import Device


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

    @property
    def passed(self) -> bool:
        """Validated at the session's sizes (and timed, for benchmarked)."""
        return self in (Status.VALIDATED, Status.BENCHMARKED)

    @property
    def usable(self) -> bool:
        """May become head: passed, or compiled where nothing can run."""
        return self.passed or self is Status.COMPILED


class SessionRow(BaseModel):
    id: str
    problem: str
    backend: str
    dtype: str
    sizes: dict[str, int]
    device: str
    device_index: int
    head: int | None = None
    baseline: dict[str, Any] | None = None
    created_at: float
    label: str | None = None
    constraints: list[str] = Field(default_factory=list)
    device_info: Device | None = None

    @property
    def runs(self) -> bool:
        """Has a device: versions are validated and timed, not only compiled."""
        return self.device_index >= 0


class VersionRow(BaseModel):
    session_id: str
    number: int
    parent: int | None = None
    origin: str
    transformation: str | None = None
    apply_id: str | None = None
    attempt: int | None = None
    source: str
    status: Status
    failure: str | None = None
    message: str | None = None
    compile: dict[str, Any] | None = None
    validation: dict[str, Any] | None = None
    timing: dict[str, Any] | None = None
    generality: dict[str, Any] | None = None
    created_at: float


class ApplyRunRow(BaseModel):
    id: str
    session_id: str
    transformation: str
    base_version: int
    instructions: str | None = None
    max_attempts: int
    attempts: int = 0
    state: str
    result_version: int | None = None
    created_at: float
