"""The MCP surface: thin tools over the domain layer (service, applier, catalog). No GPU code here."""

from __future__ import annotations

import base64
import contextlib
import threading
import warnings
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
import mcp.types as types
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from peak_mcp import __version__
from peak_mcp.apply import Applier
from peak_mcp.backends.registry import BACKENDS
from peak_mcp.catalog import Catalog, Transformation
from peak_mcp.errors import NotFound, PeakError
from peak_mcp.models import (
    ApplyStep,
    CheckReport,
    DiffReport,
    DoctorReport,
    HistoryReport,
    ProblemList,
    SessionInfo,
    SessionList,
    VersionDetail,
    VersionReport,
)
from peak_mcp.responses import result
from peak_mcp.runner.pool import cancellation
from peak_mcp.service import PeakService
from peak_mcp.suggest import Suggestions
from peak_mcp.suggest import suggest_next as rank_next

T = TypeVar("T")
# Hints for clients that ask before calling: nothing here deletes, and nothing reaches beyond this machine.
READ_ONLY = types.ToolAnnotations(read_only_hint=True, open_world_hint=False)
RUNS_ONLY = types.ToolAnnotations(read_only_hint=True, idempotent_hint=False, open_world_hint=False)  # runs kernels
RECORDS = types.ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                open_world_hint=False)
MOVES_HEAD = types.ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                   open_world_hint=False)
BACKEND = Field(description="cuda, hip or hlsl", json_schema_extra={"enum": sorted(BACKENDS)})
DTYPE = Field(description="f32, f16 or bf16 (inputs; f32 accumulation and output)",
              json_schema_extra={"enum": ["f32", "f16", "bf16"]})
# Strict: JSON true is not 1. Bounded: SQLite integers are 64-bit, and a version number past them is no version.
VersionNumber = Annotated[int, Field(strict=True, ge=0, le=2**31 - 1)]
Size = Annotated[int, Field(strict=True)]  # the problem checks the range and says which symbol is wrong
SessionId = Annotated[str, Field(description="from start_session or list_sessions")]
Version = Annotated[VersionNumber | None, Field(description="a version number from history (default: head)")]
SAMPLING_MAX_TOKENS = 16384
INSTRUCTIONS = """peak-mcp is a lab bench for GPU kernel optimization. Start with start_session (problem, backend,
dtype, sizes): version 0 is the naive kernel, validated and benchmarked, with the vendor library timed in the same
run. Then pick transformations (list_transformations / get_transformation) and apply them with
apply_transformation, or rewrite the kernel yourself and call submit_kernel. Every submission is compiled,
validated against a float64 reference and timed from a cold cache; history shows the sequence.
A kernel is one source text with one `// peak:` annotation line giving the entry point and launch geometry."""


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


class TransformationText(BaseModel):
    id: str
    title: str
    backends: list[str]
    devices: list[str]
    problems: list[str]
    tags: list[str]
    after: list[str]
    extends: str | None
    resolved_from: str | None = Field(None, description="the id asked for, when a specialization was chosen")
    body: str


class StatsReport(BaseModel):
    transformations: list[dict[str, Any]]


def _summary(t: Any) -> TransformationSummary:
    return TransformationSummary(id=t.id, title=t.title, backends=list(t.backends), devices=list(t.devices),
                                 tags=list(t.tags), extends=t.extends, summary=t.summary)


def create_server(service: PeakService, catalog: Catalog) -> MCPServer:
    applier = Applier(service, catalog)
    mcp = MCPServer("peak-mcp", instructions=INSTRUCTIONS, version=__version__)

    async def call(ctx: Context | None, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking domain call in a thread; relay its progress; turn domain errors into tool errors."""
        step = 0

        def progress(message: str) -> None:
            nonlocal step
            step += 1
            if ctx is not None:
                with contextlib.suppress(Exception):  # progress is best effort: the client may have gone
                    anyio.from_thread.run(ctx.report_progress, float(step), None, message)

        if "progress" in kwargs:
            kwargs["progress"] = progress
        cancel = threading.Event()

        def run() -> T:
            with cancellation(cancel):
                return fn(*args, **kwargs)

        try:
            # Abandoned on cancel (the client cancelled or went away): the token tells the pool to kill the job,
            # and the thread then records the version as `error: cancelled` by itself.
            return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            cancel.set()
            raise
        except PeakError as exc:
            raise ToolError(str(exc)) from None
        except OverflowError:  # a number that no record can hold (SQLite integers are 64-bit)
            raise ToolError("a number in the arguments is out of range (nothing is numbered that high)") from None

    @mcp.tool(annotations=READ_ONLY)
    async def doctor() -> Annotated[types.CallToolResult, DoctorReport]:
        """Backends and devices found on this machine, and for each one missing, why and how to fix it."""
        return result(await call(None, service.doctor, catalog.info()))

    @mcp.tool(annotations=READ_ONLY)
    async def list_problems() -> Annotated[types.CallToolResult, ProblemList]:
        """Problems the server can check and time, with size symbols, dtypes and the kernel ABI per backend."""
        return result(ProblemList(problems=service.list_problems()))

    @mcp.tool(annotations=RECORDS)
    async def start_session(
        ctx: Context,
        problem: Annotated[str, Field(description="problem name, e.g. matmul")] = "matmul",
        backend: Annotated[str, BACKEND] = "cuda",
        dtype: Annotated[str, DTYPE] = "f32",
        # Any values: the problem checks each one and says which is wrong, in words rather than a schema error.
        sizes: Annotated[dict[str, Any] | str | None, Field(
            description="{'M': 4096, 'N': 4096, 'K': 4096}, or 'M=4096,N=4096,K=4096'; symbols left out take the "
                        "problem's defaults (the answer's note says which); default: the problem's, less on a CPU "
                        "device")] = None,
        label: Annotated[str | None, Field(description="a name for the session, shown in list_sessions")] = None,
        constraints: Annotated[list[str] | None, Field(
            description="size conditions kernels may assume, e.g. ['M % 128 == 0', 'K >= 64']; generality checks "
                        "only sizes that meet them")] = None,
    ) -> Annotated[types.CallToolResult, SessionInfo]:
        """Start a session: version 0 is the naive kernel, validated and benchmarked; the vendor library is timed
        in the same run."""
        return result(await call(ctx, service.start_session, problem, backend, dtype, sizes, label, progress=None,
                          constraints=constraints))

    @mcp.tool(annotations=READ_ONLY)
    async def list_sessions(
        offset: Annotated[int, Field(strict=True, ge=0, description="sessions to skip")] = 0,
        limit: Annotated[int, Field(strict=True, ge=1, le=100, description="sessions per page")] = 20,
    ) -> Annotated[types.CallToolResult, SessionList]:
        """Sessions in the data directory, oldest first, one line each (start_session's answer has the details);
        `total` says how many there are, page with offset."""
        return result(await call(None, service.session_list, offset, limit))

    @mcp.tool(annotations=RECORDS)
    async def submit_kernel(
        ctx: Context,
        session_id: SessionId,
        source: Annotated[str, Field(description="the whole kernel file, with its `// peak:` annotation line")],
        parent: Annotated[VersionNumber | None,
                          Field(description="the version this derives from (default: head)")] = None,
        transformation: Annotated[str | None, Field(description="catalog id of the transformation applied")] = None,
        require_generality: Annotated[bool, Field(
            description="head moves to this version only if it also passes at the sampled other sizes")] = True,
    ) -> Annotated[types.CallToolResult, VersionReport]:
        """Compile, validate and benchmark a kernel as a new version of the session; then validate it at sampled
        other sizes (generality)."""
        if transformation is not None:  # statistics count only catalog transformations
            try:
                catalog.get(transformation)
            except PeakError as exc:
                raise ToolError(f"{exc}\nOmit transformation for a kernel written freely.") from None
        if transformation:
            attached = await call(ctx, applier.attach_submission, session_id, transformation, source, parent,
                                  progress=None)
            if attached is not None:
                return result(attached)
        return result(await call(ctx, service.submit_kernel, session_id, source, parent, transformation,
                                 progress=None, require_generality=require_generality))

    @mcp.tool(annotations=RUNS_ONLY)
    async def validate(
        ctx: Context, session_id: SessionId, version: Version = None,
        sizes: Annotated[dict[str, Size] | None, Field(description="other sizes to check generality")] = None,
        trials: Annotated[int | None, Field(strict=True, description="random input sets, 1-20")] = None,
    ) -> Annotated[types.CallToolResult, CheckReport]:
        """Re-check a version (default: head) for correctness, optionally at other sizes."""
        return result(await call(ctx, service.check, session_id, version, sizes, benchmark=False, trials=trials,
                          progress=None))

    @mcp.tool(annotations=RUNS_ONLY)
    async def benchmark(
        ctx: Context, session_id: SessionId, version: Version = None,
        sizes: Annotated[dict[str, Size] | None, Field(description="other sizes to time at (default: the session's)")]
        = None,
        time_budget_s: Annotated[float | None, Field(description="seconds of timed launches, 0.05-60")] = None,
    ) -> Annotated[types.CallToolResult, CheckReport]:
        """Validate and time a version (default: head), optionally at other sizes; the vendor library is timed
        in the same run."""
        return result(await call(ctx, service.check, session_id, version, sizes, benchmark=True,
                          time_budget_s=time_budget_s, progress=None))

    @mcp.tool(annotations=READ_ONLY)
    async def history(session_id: SessionId,
                      chart: Annotated[bool, Field(description="also a PNG of the lineage")] = False
                      ) -> Annotated[types.CallToolResult, HistoryReport]:
        """The version table (parent, transformation, status, time, TFLOP/s, speedups); with chart=true also a PNG
        of performance along the sequence."""
        report = await call(None, service.history, session_id)
        content: list[Any] = [types.TextContent(type="text", text=report.table)]
        if chart:
            png = await call(None, service.history_chart, session_id)
            content.append(types.ImageContent(type="image", data=base64.b64encode(png).decode(),
                                              mime_type="image/png"))
        return types.CallToolResult(content=content, structured_content=report.model_dump(mode="json"))

    @mcp.tool(annotations=READ_ONLY)
    async def get_version(session_id: SessionId,
                          version: Version = None) -> Annotated[types.CallToolResult, VersionDetail]:
        """One version's source and report (default: head)."""
        return result(await call(None, service.get_version, session_id, version))

    @mcp.tool(annotations=READ_ONLY)
    async def diff(session_id: SessionId, a: Annotated[VersionNumber, Field(description="the older version")],
                   b: Annotated[VersionNumber | None, Field(description="the newer version (default: head)")] = None
                   ) -> Annotated[types.CallToolResult, DiffReport]:
        """Unified diff between two versions' sources (b defaults to head)."""
        return result(await call(None, service.diff, session_id, a, b))

    @mcp.tool(annotations=MOVES_HEAD)
    async def revert(
        session_id: SessionId, version: Annotated[VersionNumber, Field(description="the version to make head")],
        require_generality: Annotated[bool, Field(
            description="refuse a version that failed at other sizes (generality)")] = True,
    ) -> Annotated[types.CallToolResult, VersionReport]:
        """Make an earlier passing version the head again; nothing is deleted."""
        return result(await call(None, service.revert, session_id, version, require_generality))

    @mcp.tool(annotations=READ_ONLY)
    async def get_transformation_stats() -> Annotated[types.CallToolResult, StatsReport]:
        """Per transformation: attempts, first-try success rate, failure kinds, median speedup over the parent."""
        return result(StatsReport(transformations=await call(None, applier.statistics)))

    @mcp.tool(annotations=READ_ONLY)
    async def list_transformations(
        backend: Annotated[str | None, BACKEND] = None, device: Annotated[str | None, Field(
            description="device name, arch (sm_90) or family (hopper); portable ones always match")] = None,
        problem: Annotated[str | None, Field(description="e.g. matmul")] = None,
        tag: Annotated[str | None, Field(description="e.g. memory, tensor-cores")] = None,
        text: Annotated[str | None, Field(description="case-insensitive search in id, title and text")] = None,
        dtype: Annotated[str | None, DTYPE] = None,
    ) -> Annotated[types.CallToolResult, TransformationList]:
        """The natural-transformation catalog, filtered."""
        descriptor = _device_descriptor(device)
        found = catalog.list(backend=backend, device=descriptor, problem=problem, tag=tag, text=text, dtype=dtype)
        return result(TransformationList(transformations=[_summary(t) for t in found],
                                  errors=[e.model_dump() if hasattr(e, "model_dump") else dict(e.__dict__)
                                          for e in catalog.errors]))

    @mcp.tool(annotations=READ_ONLY)
    async def get_transformation(
        id: Annotated[str, Field(description="catalog id, see list_transformations")],
        backend: Annotated[str | None, BACKEND] = None,
        device: Annotated[str | None, Field(description="pick the most specific text for this device")] = None,
    ) -> Annotated[types.CallToolResult, TransformationText]:
        """The full text of one transformation; with backend (and device) the most specific specialization."""
        try:
            t = catalog.resolve(id, backend, _device_descriptor(device)) if backend else catalog.get(id)
        except PeakError as exc:
            raise ToolError(str(exc)) from None
        return result(TransformationText(id=t.id, title=t.title, backends=list(t.backends),
                                         devices=list(t.devices),
                                  problems=list(t.problems), tags=list(t.tags), after=list(t.after),
                                  extends=t.extends, resolved_from=id if t.id != id else None, body=t.body))

    @mcp.tool(annotations=RECORDS)
    async def apply_transformation(
        ctx: Context,
        session_id: SessionId,
        transformation: Annotated[str, Field(description="catalog id, see list_transformations")],
        version: Annotated[VersionNumber | None, Field(description="version to transform (default: head)")] = None,
        instructions: Annotated[str | None, Field(description="extra guidance for the LLM")] = None,
        max_attempts: Annotated[int | None, Field(strict=True, ge=1, le=10,
                                                  description="attempts before giving up, 1-10 (default 3)")] = None,
    ) -> ApplyStep | types.InputRequiredResult:
        """Have the client's LLM apply a transformation (MCP sampling), then compile, validate and benchmark,
        retrying with the compiler or validation feedback. Without sampling it returns the brief: rewrite the
        kernel yourself and call submit_kernel with transformation set."""
        capabilities = ctx.client_capabilities
        if capabilities is None or capabilities.sampling is None:
            step = await call(ctx, applier.begin, session_id, transformation, version, instructions, max_attempts)
            step.message = ("this client does not offer MCP sampling: rewrite the kernel as the brief says, then "
                            f"call submit_kernel(session_id={session_id!r}, source=..., "
                            f"transformation={transformation!r}); that submission is recorded as this run's attempt")
            return step
        if ctx.protocol_version is not None and ctx.protocol_version >= "2026-07-28":
            return await _apply_by_rounds(ctx, session_id, transformation, version, instructions, max_attempts)
        step = await call(ctx, applier.begin, session_id, transformation, version, instructions, max_attempts)
        while not step.done:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # sampling is deprecated in the 2026-07-28 spec, live before it
                    reply = await ctx.session.create_message(
                        messages=[_user_message(step.brief or "")], system_prompt=step.system_prompt,
                        max_tokens=SAMPLING_MAX_TOKENS)
            except Exception as exc:
                step.message = (f"sampling failed ({exc}); the run stays open: rewrite the kernel yourself from "
                                "the brief and call submit_kernel with transformation set")
                return step
            step = await call(ctx, applier.answer, step.run_id, _reply_text(reply), progress=None)
        return step

    async def _apply_by_rounds(ctx: Context, session_id: SessionId, transformation: str, version: int | None,
                               instructions: str | None, max_attempts: int | None) -> ApplyStep | Any:
        """2026-07-28 clients: each LLM call is an input-required round; the run id rides request_state."""
        state = ctx.request_state
        if state is None:
            step = await call(ctx, applier.begin, session_id, transformation, version, instructions, max_attempts)
        else:
            run_id, _, attempt = state.partition(":")
            run = await call(None, service.store.apply_run, run_id)
            if run["session_id"] != session_id or run["transformation"] != transformation:
                raise ToolError("request_state does not belong to this call; start apply_transformation again")
            response = (ctx.input_responses or {}).get(f"attempt-{attempt}")
            if response is None:
                step = await call(None, applier.step, run_id)
            else:
                step = await call(ctx, applier.answer, run_id, _reply_text(response), progress=None)
        if step.done:
            return step
        request = types.CreateMessageRequest(params=types.CreateMessageRequestParams(
            messages=[_user_message(step.brief or "")], system_prompt=step.system_prompt,
            max_tokens=SAMPLING_MAX_TOKENS))
        return types.InputRequiredResult(input_requests={f"attempt-{step.attempt}": request},
                                         request_state=f"{step.run_id}:{step.attempt}")

    # --- resources and prompts -------------------------------------------------------------------------------
    @mcp.resource("transformation://{transformation_id}", mime_type="text/markdown")
    def transformation_text(transformation_id: str) -> str:
        """The Markdown text of one natural transformation."""
        try:
            return catalog.get(transformation_id).raw_text()
        except NotFound as exc:
            raise ValueError(str(exc)) from None

    # Listed one by one too, so clients that browse resources (not templates) see the whole catalog.
    for item in catalog.list():
        mcp.resource(f"transformation://{item.id}", name=item.id, title=item.title, description=item.summary,
                     mime_type="text/markdown")(_text_reader(item))

    @mcp.prompt()
    def optimize_kernel(problem: str = "matmul", backend: str = "cuda", dtype: str = "f32",
                        sizes: str = "M=4096,N=4096,K=4096", goal: str = "reach the vendor library's speed") -> str:
        """How an agent runs the PEAK loop with this server."""
        return OPTIMIZE_PROMPT.format(problem=problem, backend=backend, dtype=dtype, sizes=sizes, goal=goal)

    @mcp.tool(annotations=RUNS_ONLY)
    async def profile(session_id: SessionId, version: Version = None,
                      counters: Annotated[bool, Field(description="CUDA on a GPU: one launch under Nsight Compute")]
                      = True, ctx: Context | None = None) -> dict[str, Any]:
        """Registers, shared/local memory, spills and occupancy; the instruction mix (SASS via nvdisasm on CUDA,
        SPIR-V on HLSL); Nsight Compute counters where ncu works. Each part says when it is unavailable and why."""
        return await call(ctx, service.profile, session_id, version, counters=counters, progress=None)

    @mcp.tool(annotations=READ_ONLY)
    async def suggest_next(session_id: SessionId, limit: Annotated[int, Field(strict=True, ge=1, le=25,
                                                                         description="suggestions")] = 5
                           ) -> Annotated[types.CallToolResult, Suggestions]:
        """Transformations ranked for the session's head (lineage, source features, catalog order, backend, dtype,
        device), each with one line of why; apply one with apply_transformation."""
        return result(await call(None, rank_next, service, catalog, session_id, limit))

    return mcp


def _text_reader(item: Transformation) -> Callable[[], str]:
    def read() -> str:
        return item.raw_text()
    return read


OPTIMIZE_PROMPT = """Optimize the {problem} kernel on the {backend} backend ({dtype}, sizes {sizes}); goal: {goal}.

1. Call doctor to see which backends and devices this machine has.
2. Call start_session(problem="{problem}", backend="{backend}", dtype="{dtype}", sizes={{...}}). Read version 0's
   time, TFLOP/s, % of peak and the vendor baseline: the gap tells you how far there is to go.
3. Call list_transformations(backend="{backend}", device=<the session's device name>) and read the candidates'
   summaries; fetch full texts with get_transformation(id, backend, device) when unsure.
4. Apply one transformation at a time: apply_transformation(session_id, id). If your client cannot sample, the
   tool returns a brief; rewrite the kernel as it says and call submit_kernel(session_id, source,
   transformation=id). Before each step, predict what should move (time, TFLOP/s) and why.
5. Read the report: a failed attempt names the failing check and gives numbers; fix and resubmit. A slower
   version is legal but usually wrong direction: revert(session_id, version) moves head back.
6. Check generality with validate(session_id, sizes={{...}}) at sizes that are not tile multiples.
7. Finish with history(session_id, chart=true) and summarize what worked, with the measured numbers.
"""


def _device_descriptor(device: str | None) -> dict[str, str] | None:
    if not device:
        return None
    text = device.strip()
    lowered = text.lower()
    family = {"h100": "hopper", "h200": "hopper", "gh200": "hopper", "a100": "ampere", "mi300": "cdna3",
              "mi250": "cdna2", "mi200": "cdna2"}
    found = next((f for key, f in family.items() if key in lowered), "")
    arch = lowered if lowered.startswith(("sm_", "gfx")) else ""
    if lowered in ("hopper", "ampere", "ada", "cdna2", "cdna3", "rdna3", "cpu"):
        found = lowered
    return {"name": text, "arch": arch, "family": found}


def _user_message(text: str) -> types.SamplingMessage:
    return types.SamplingMessage(role="user", content=types.TextContent(type="text", text=text))


def _reply_text(result: Any) -> str:
    content = getattr(result, "content", None)
    items = content if isinstance(content, list) else [content]
    return "\n".join(getattr(c, "text", "") for c in items if c is not None)

