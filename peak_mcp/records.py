"""Typed records shared by the service, the store and the reports: a version's status."""

from __future__ import annotations

from enum import StrEnum


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
