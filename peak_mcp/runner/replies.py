"""What a worker sends back, as typed records shared by both ends (the jobs it receives are in messages.py).

One JSON line per message: `ready` (the device opened), `fatal` (it did not), `progress` (the job's current step:
what the hang detector and a timeout message name), and `result`, which is either the job's typed result
(`ok: true`) or why the job failed (`ok: false`, with `fatal` when the device context is lost). The pool parses
every line with `REPLY`, so a reply that does not match is reported as such instead of failing deep in the service.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Field, Tag, TypeAdapter, ValidationError

from peak_mcp.backends.base import DeviceFacts
from peak_mcp.evaluation.configs import ConfigResult
from peak_mcp.evaluation.phases import Baseline, CompileInfo, Generality, SanitizerReport, Timing, Verdict
from peak_mcp.evaluation.profiling.report import ProfileReport


class EvaluateResult(BaseModel):
    """Each part is there when its step ran: no validation after a failed compile, no timing after a failed check."""

    type: Literal["evaluate"] = "evaluate"
    device: DeviceFacts
    compile: CompileInfo | None = None
    validation: Verdict | None = None
    timing: Timing | None = None
    revalidation: Verdict | None = None  # faster than the vendor library: validated again on fresh inputs
    baseline: Baseline | None = None


class GeneralityResult(BaseModel):
    type: Literal["generality"] = "generality"
    compile: CompileInfo | None = None  # only when the source did not compile
    generality: Generality | None = None
    sanitizer: SanitizerReport | None = None


class TuneResult(BaseModel):
    type: Literal["tune"] = "tune"
    device: DeviceFacts
    results: list[ConfigResult]  # one per configuration sent, in order
    seconds: float


class ProfileResult(BaseModel):
    type: Literal["profile"] = "profile"
    compile: CompileInfo | None = None  # only when the source did not compile
    profile: ProfileReport | None = None


class PrepareResult(BaseModel):
    type: Literal["prepare"] = "prepare"
    made: int = 0  # input sets drawn now, kept or spare (those held already are not counted)
    skipped: list[str] = Field(default_factory=list)  # sizes left unprepared, each with why
    seconds: float = 0.0


JobResult = Annotated[EvaluateResult | GeneralityResult | TuneResult | ProfileResult | PrepareResult,
                      Field(discriminator="type")]


class Ready(BaseModel):
    event: Literal["ready"] = "ready"
    device: DeviceFacts


class Fatal(BaseModel):
    """The worker could not open its device, and exits."""

    event: Literal["fatal"] = "fatal"
    error: str


class ProgressNote(BaseModel):
    event: Literal["progress"] = "progress"
    id: int | None
    message: str


class Done(BaseModel):
    event: Literal["result"] = "result"
    id: int | None
    ok: Literal[True] = True
    result: JobResult


class Failed(BaseModel):
    event: Literal["result"] = "result"
    id: int | None
    ok: Literal[False] = False
    kind: str  # an error kind (PeakError.kind), or kernel_fault / timeout for a lost device context
    error: str
    fatal: bool = False  # the device context is unusable: the worker exits after this reply


def _tag(message: Any) -> str:
    """`result` lines are split on `ok`, the rest on `event`."""
    event = message.get("event") if isinstance(message, dict) else getattr(message, "event", None)
    if event == "result":
        ok = message.get("ok") if isinstance(message, dict) else message.ok
        return "done" if ok is True else "failed"
    return str(event)


Reply = Annotated[Annotated[Ready, Tag("ready")] | Annotated[Fatal, Tag("fatal")]
                  | Annotated[ProgressNote, Tag("progress")] | Annotated[Done, Tag("done")]
                  | Annotated[Failed, Tag("failed")], Discriminator(_tag)]
REPLY: TypeAdapter[Reply] = TypeAdapter(Reply)


class MalformedReply(ValueError):
    """A line from the worker that is not a reply this server reads: the two disagree (a bug, or mixed versions)."""


def parse_reply(line: bytes) -> Reply:
    try:
        return REPLY.validate_json(line)
    except ValidationError as exc:
        where = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:]) or 'the line'}: {e['msg']}"
                          f" (got {_short(e['input'])})" for e in exc.errors(include_url=False)[:3])
        raise MalformedReply(where) from None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
