"""What each phase of an evaluation found, as typed records: built in a worker, carried in its reply, kept in a
version's (or session's) JSON columns and read back from them.

A `Record` dumps only the fields that were set (passed to its constructor, assigned, or present in the JSON it was
read from), so a worker's reply, the stored row and the report an agent reads stay the same JSON, rows written by
earlier releases included. Check-specific numbers (a finding's indices and samples, error statistics, a library's
name) stay extra fields: they vary by check and backend, and are shown, never read.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, field_validator, model_serializer


class Record(BaseModel):
    model_config = ConfigDict(extra="allow")

    @model_serializer(mode="wrap")
    def _only_what_was_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if k in self.model_fields_set}


def dumped(record: BaseModel | None) -> dict[str, Any] | None:
    """A record as the JSON object the MCP models carry (None stays None)."""
    return None if record is None else record.model_dump(mode="json")


class CompileInfo(BaseModel):
    ok: bool
    log: str = ""
    # `resources`: the compiler went past a memory or time limit. Left out when unset, so rows stored before it
    # read back as they were written.
    reason: str | None = Field(default=None, exclude_if=lambda value: value is None)
    resources: dict[str, Any] = Field(default_factory=dict)  # per backend: registers, shared bytes, arch, ...
    seconds: float | None = None

    @field_validator("log")
    @classmethod
    def _no_nul(cls, log: str) -> str:
        """NVRTC's and the HIP runtime's logs are C strings: their terminating NUL came through as text."""
        return log.replace("\x00", "").rstrip()


class SanitizerFinding(Record):
    check: str  # sanitizer_<tool>
    message: str


class UncheckedTool(Record):
    tool: str
    message: str


class SanitizerReport(Record):
    """compute-sanitizer over one launch; where it is not installed, what is missing (what, why, fix)."""

    available: bool
    passed: bool | None = None
    sizes: dict[str, int] | None = None
    clean: list[str] = Field(default_factory=list)
    failures: list[SanitizerFinding] = Field(default_factory=list)
    unchecked: list[UncheckedTool] = Field(default_factory=list)
    seconds: float | None = None
    what: str | None = None
    why: str | None = None
    fix: str | None = None


class Verdict(Record):
    """Validation's answer: passed, or the first failing check with a message the agent can act on."""

    passed: bool
    check: str | None = None
    message: str | None = None
    trials: int | None = None
    buffer: str | None = None
    seconds: float | None = None
    reference: str | None = None  # where inputs, float64 reference and checks were computed: "cuda (cupy)", ...
    sanitizer: SanitizerReport | None = None  # kept with the version's validation once generality ran it


class Recheck(Record):
    """Guards, inputs and outputs after the timed launches."""

    passed: bool
    check: str | None = None
    input_set: int | None = None
    message: str | None = None


class Summary(Record):
    """A timed loop's statistics (timing.summarize), for kernels and vendor libraries alike."""

    reps: int | None = None
    median_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    p25_ms: float | None = None  # the middle half of the timed launches (the spread reports judge speedups by)
    p75_ms: float | None = None
    mean_ms: float | None = None
    cv: float | None = None
    tflops: float | None = None
    gbps: float | None = None
    cold_cache: bool | None = None
    wall_s: float | None = None  # the timed loop alone
    stopped: str | None = None  # what ended the timed launches (timing.measure): steady, budget, cap or check


class Timing(Summary):
    """A kernel's benchmark. Only the median is sure to be there: the first release stored little else."""

    median_ms: float
    input_sets: int | None = None
    recheck: Recheck | None = None
    device_name: str | None = None
    seconds: float | None = None  # warm-up and the output re-check included
    params: dict[str, int] | None = None  # the configuration timed, for a kernel with tuning parameters
    # where it came from: "tuned" (this version's tune), "parent" (inherited: the parent's tuned configuration) or
    # "defaults" (each list's first value); rows from before it was recorded hold only tuned configurations
    params_from: str | None = None
    # with params_from "parent": the names whose values came from the parent's tuned configuration (the others are
    # this source's defaults: parameters the parent never had, or whose tuned value is not among the candidates)
    params_inherited: list[str] | None = None
    # with params_from "parent": the version whose tune chose those values (the parent, or further up where the
    # parent inherited them too)
    params_tuned_on: int | None = None

    def configured_as(self, other: Timing) -> Timing:
        """This measurement, labelled with the configuration `other` is of and where that came from (a re-timing
        of a stored version at its stored configuration)."""
        return self.model_copy(update={k: getattr(other, k) for k in (
            "params", "params_from", "params_inherited", "params_tuned_on")})


class Baseline(Summary):
    """The vendor library at the session's sizes, or why there is none."""

    available: bool
    reason: str | None = None
    library: str | None = None
    note: str | None = None
    rounds_ms: list[float] | None = None  # each round's median where it was timed in rounds (the quietest is kept)
    # Yardsticks every problem has (peak_mcp.evaluation.yardsticks), beside the vendor library's: the device's
    # measured copy bandwidth (the roofline's memory term), PyTorch eager and torch.compile on the same inputs
    # (compile_s: the compilation, not timed), and once, why the torch ones are absent.
    copy_gbps: float | None = None
    torch_eager_ms: float | None = None  # the fastest of torch's paths (evaluation/torch_paths.py)
    torch_eager_path: str | None = None  # which, where torch has more than its default for the problem
    torch_eager_paths: dict[str, float | str] | None = None  # each path's median ms, or why it did not run
    torch_compile_ms: float | None = None
    torch_compile_s: float | None = None
    torch_note: str | None = None


class SizeFailure(Record):
    sizes: dict[str, int] | str  # a string where only the worker's last progress line named them
    check: str | None = None
    message: str | None = None


class Generality(Record):
    """Validation at sampled other sizes. passed None: unchecked (the note says why)."""

    passed: bool | None = None
    sizes_checked: list[dict[str, int]] = Field(default_factory=list)
    failures: list[SizeFailure] = Field(default_factory=list)
    constraints: list[str] | None = None
    note: str | None = None
    seconds: float | None = None
