"""An experiment's plan, read from SPEC.json: one problem at one backend, dtype and sizes; the catalog
transformations to apply, each from the same base version, `repeats` times, and/or sequences of them, each step
transforming what the step before made; the model that answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator


class ModelSpec(BaseModel):
    label: str = Field(description="the model's name in the results and reports")
    backend: Literal["exchange", "replay"]
    folder: Path | None = Field(None, description="exchange: where request-<n>.json and reply-<n>.txt pass")
    recording: Path | None = Field(None, description="replay: an earlier run's exchanges.jsonl")
    timeout_s: float = Field(3600.0, gt=0, description="exchange: how long a reply may take")
    poll_s: float = Field(0.5, gt=0, description="exchange: how often the folder is looked at")


class ExperimentSpec(BaseModel):
    problem: str = "matmul"
    backend: str = "hlsl"
    dtype: str = "f32"
    sizes: dict[str, int] | None = None
    transformations: list[str] = Field(default_factory=list, description="each applied to the base version")
    sequences: list[list[str]] = Field(default_factory=list, description=(
        "each applied step by step: step k transforms the version step k-1 made, or where that step failed the "
        "run's last passing version"))
    repeats: int = Field(5, ge=1, description="runs per transformation (PEAK: five)")
    max_attempts: int = Field(3, ge=1, le=10, description="apply_transformation's attempts per run")
    session_id: str | None = Field(None, description="run in this existing session (its problem, sizes and device) "
                                                      "instead of starting one")
    base_version: int = Field(0, ge=0, description="every run transforms this version; past 0 only with session_id, "
                                                   "since a new session holds only v0")
    retime: bool = Field(True, description=(
        "after each passing sequence step, time its result and base_version again back to back (benchmark) and "
        "take the speedup over the base from that pair: two times seconds apart, not one from the session's start "
        "(on a shared CPU the same source timed 410 ms and 194 ms minutes apart)"))
    model: ModelSpec
    server: Literal["in-process", "stdio"] = "in-process"
    parallel: int = Field(1, ge=1, le=64, description=(
        "sessions run side by side, each with its own MCP client, pulling cells and sequence runs from one queue; "
        "session i starts on device i % the backend's devices. Where there are fewer devices, sessions share them: "
        "the server queues jobs per device, so no two timings overlap (a shared device serializes them). Needs the "
        "in-process server; with session_id every client works in that one session"))

    @model_validator(mode="after")
    def _base_exists(self) -> ExperimentSpec:
        if not self.transformations and not self.sequences:
            raise ValueError("the plan needs transformations or sequences (or both)")
        if any(not sequence for sequence in self.sequences):
            raise ValueError("a sequence needs at least one transformation")
        if self.parallel > 1 and self.server != "in-process":  # a stdio server each: two would own one device
            raise ValueError("parallel above 1 needs the in-process server (one server, its devices shared out)")
        if self.base_version and self.session_id is None:
            raise ValueError(f"base_version {self.base_version} needs session_id: a new session holds only v0")
        return self

    @classmethod
    def read(cls, path: Path) -> ExperimentSpec:
        """The spec, its relative paths taken from the spec file's folder."""
        spec = cls.model_validate(json.loads(path.read_text()))
        for name in ("folder", "recording"):
            value = getattr(spec.model, name)
            if value is not None and not value.is_absolute():
                setattr(spec.model, name, (path.parent / value).resolve())
        return spec
