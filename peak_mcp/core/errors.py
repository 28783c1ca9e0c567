"""Errors the agent sees. Each carries a hint that says what to do next."""

from __future__ import annotations

import os


class PeakError(Exception):
    """An error caused by the request, reported to the agent with an actionable hint."""

    kind = "error"

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\nHint: {self.hint}" if self.hint else self.message


class NotFound(PeakError):
    kind = "not_found"


class InvalidInput(PeakError):
    kind = "invalid_input"


class AnnotationError(InvalidInput):
    kind = "annotation"


class Unavailable(PeakError):
    """The request is fine but this machine cannot serve it (no GPU, no compiler, ...)."""

    kind = "unavailable"


class DeviceMemory(PeakError):
    """The device had too little free memory for the job: the server's or the machine's limit, not the kernel's
    fault (runner/device_memory.py gives cached memory back and words it)."""

    kind = "device_memory"


def busy_note() -> str:
    """What a timeout message says about the machine: the load average against the core count when the machine is
    busier than its cores (a slow launch is then the machine's doing, not the kernel's), else nothing."""
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):  # no load average on this platform
        return ""
    cores = os.cpu_count() or 1
    return f"; the load average is {load:.1f} on {cores} cores: this machine is busy" if load > cores else ""
