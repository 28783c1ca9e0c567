"""The catalog: list, read and rank transformations; its texts as resources; the loop as a prompt."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import mcp.types as types
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field, create_model

from peak_mcp.api.responses import result
from peak_mcp.api.tools.common import BACKEND, DTYPE, READ_ONLY, SessionId, call
from peak_mcp.catalog.contract import contract_note, own_contract, written_for
from peak_mcp.catalog.rendering import render_body
from peak_mcp.catalog.suggest import Suggestions
from peak_mcp.catalog.transformations import Catalog, DeviceDescriptor, Transformation
from peak_mcp.core.errors import NotFound, PeakError
from peak_mcp.loop.apply import Applier
from peak_mcp.loop.models import StatsReport, TransformationList, TransformationSummary, TransformationText
from peak_mcp.loop.service import PeakService

TextAnswer = TransformationText


class ListedText(TransformationSummary):
    summary: str | None = Field(None, description="in the answer's text, on the transformation's line")


ListAnswer = create_model("TransformationList", __base__=TransformationList, transformations=(list[ListedText], ...))


def register(mcp: MCPServer, service: PeakService, catalog: Catalog, applier: Applier) -> None:
    """The catalog tools, its texts as resources, and the optimize_kernel prompt."""

    @mcp.tool(annotations=READ_ONLY)
    async def get_transformation_stats(
        session_id: Annotated[str | None, Field(
            description="one session's attempts only; without it, every session in this data dir")] = None,
    ) -> Annotated[types.CallToolResult, StatsReport]:
        """Per transformation: attempts, successes (a general, passing child faster than its parent beyond timing
        noise), within-noise results and slowdowns apart, first-try success rate, failure kinds, speedups. Covers
        every session in this data dir unless session_id names one; `scope` says which."""
        return result(StatsReport(**await call(None, service.transformation_stats, session_id)))

    @mcp.tool(annotations=READ_ONLY)
    async def list_transformations(
        backend: Annotated[str | None, BACKEND] = None, device: Annotated[str | None, Field(
            description="device name, arch (sm_90) or family (hopper); portable ones always match")] = None,
        problem: Annotated[str | None, Field(description="e.g. matmul, softmax: the texts that share one of its "
                                                         "traits (row_reduction, gemm, ...) or apply to any")] = None,
        tag: Annotated[str | None, Field(description="e.g. memory, tensor-cores")] = None,
        text: Annotated[str | None, Field(description="case-insensitive search in id, title and text")] = None,
        dtype: Annotated[str | None, DTYPE] = None,
        session_id: Annotated[str | None, Field(
            description="a session: its problem, backend, dtype and device filter where not given")] = None,
    ) -> Annotated[types.CallToolResult, ListAnswer]:
        """The natural-transformation catalog, filtered (by a session's problem, backend, dtype and device with
        session_id)."""
        descriptor = _device_descriptor(device)
        if session_id is not None:
            try:
                session = service.store.session(session_id)
            except PeakError as exc:
                raise ToolError(str(exc)) from None
            backend, dtype, problem = backend or session.backend, dtype or session.dtype, problem or session.problem
            descriptor = descriptor or DeviceDescriptor.of(service.device_of(session))
        traits = _traits(service, problem)
        found = catalog.list(backend=backend, device=descriptor, problem=problem, tag=tag, text=text, dtype=dtype,
                             traits=traits)
        return result(TransformationList(transformations=[_summary(t) for t in found],
                                  errors=[e.model_dump() if hasattr(e, "model_dump") else dict(e.__dict__)
                                          for e in catalog.errors],
                                  note=None if found else catalog.empty_note(backend, problem, tag, text, dtype,
                                                                                 descriptor, traits)))

    @mcp.tool(annotations=READ_ONLY)
    async def get_transformation(
        transformation: Annotated[str, Field(description="catalog id, see list_transformations")],
        backend: Annotated[str | None, BACKEND] = None,
        device: Annotated[str | None, Field(description="pick the most specific text for this device")] = None,
        session_id: Annotated[str | None, Field(
            description="a session: the text for its backend, dtype and device, its Keep unchanged stating the "
                        "session's own kernel contract (ABI) instead of the text's example's")] = None,
    ) -> Annotated[types.CallToolResult, TextAnswer]:
        """The full text of one transformation; with backend (and device) the most specific specialization; with
        session_id, as that session's brief gives it (its backend's items and its own ABI)."""
        t, body = await call(None, _text_for, service, catalog, transformation, session_id, backend, device)
        return result(TransformationText(id=t.id, title=t.title, backends=list(t.backends),
                                         devices=list(t.devices),
                                  traits=list(t.traits) or (["any"] if t.for_any_problem else []),
                                  problems=list(t.problems), tags=list(t.tags), after=list(t.after),
                                  extends=t.extends, resolved_from=transformation if t.id != transformation else None,
                                  body=body))

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
                        sizes: str | None = None, goal: str = "beat the yardstick the session names") -> str:
        """How an agent runs the PEAK loop with this server (sizes: the problem's defaults unless given)."""
        if sizes is None:  # the problem's own symbols: matmul's M,N,K mean nothing to a LayerNorm
            try:
                sizes = ",".join(f"{s}={v}" for s, v in service.problem(problem).default_sizes.items())
            except PeakError:
                sizes = "the problem's defaults (list_problems)"
        return OPTIMIZE_PROMPT.format(problem=problem, backend=backend, dtype=dtype, sizes=sizes, goal=goal)

    @mcp.tool(annotations=READ_ONLY)
    async def suggest_next(session_id: SessionId, limit: Annotated[int, Field(strict=True, ge=1, le=25,
                                                                         description="suggestions")] = 5
                           ) -> Annotated[types.CallToolResult, Suggestions]:
        """Transformations ranked for the session's head (lineage, source features, catalog order, backend, dtype,
        device), each with one line of why; apply one with apply_transformation."""
        return result(await call(None, service.suggest_next, catalog, session_id, limit))


def _text_for(service: PeakService, catalog: Catalog, transformation: str, session_id: str | None,
              backend: str | None, device: str | None) -> tuple[Transformation, str]:
    """A text and its body as get_transformation gives it. Without a session: as written, its Keep unchanged
    saying whose contract its items cite (the problems' own argument names tell) and that a session's governs.
    With one: resolved for its backend, dtype and device (those given win), the items for other backends left out,
    and its Keep unchanged stating the session's own ABI (a LayerNorm session was shown matmul's
    `bindings 0, 1, 2, M, N, K`)."""
    if session_id is None:
        t = (catalog.resolve(transformation, backend, _device_descriptor(device)) if backend
             else catalog.get(transformation))
        cites, whose = written_for(t, service.ctx.problems.problems())
        return t, _not_for(t, backend) + (contract_note(t.body, whose) if cites else t.body)
    session = service.store.session(session_id)
    backend = backend or session.backend
    found = service.device_of(session)
    t = catalog.resolve(transformation, backend, _device_descriptor(device) or DeviceDescriptor.of(found),
                        session.dtype)
    problem = service.problem(session.problem)
    if backend not in t.backends:  # rendered for a backend it has no items for, its steps would point at nothing
        return t, _not_for(t, backend) + t.body
    body = render_body(t.body, backend, found.arch)
    if not t.for_problem(problem.name, problem.traits):  # asked for by id: said before its steps are followed
        body = (f"> Not written for {problem.name}: this text is for {t.scope()}, and its steps assume that kind of "
                f"kernel (list_transformations with problem={problem.name} lists the texts for this session).\n\n"
                + body)
    if session.dtype not in problem.dtypes_for(backend):  # no contract of the problem to state for that backend
        return t, contract_note(body, None)
    return t, own_contract(body, f"{problem.name} ({backend}, {session.dtype})", problem.abi(backend, session.dtype))


def _not_for(t: Transformation, backend: str | None) -> str:
    """The line before a text asked for on a backend it is not written for (an HLSL agent was told to use a CUDA
    helper the same brief had left out)."""
    if backend is None or backend in t.backends:
        return ""
    return (f"> Not for {backend}: this text is written for {', '.join(t.backends)} only, and apply_transformation "
            f"refuses it in a {backend} session. Shown as written, for reading.\n\n")


def _traits(service: PeakService, problem: str | None) -> tuple[str, ...]:
    """A problem's traits, () for a name no problem has (then only its name and `any` match)."""
    if problem is None:
        return ()
    try:
        return tuple(service.problem(problem).traits)
    except PeakError:
        return ()


def _summary(t: Any) -> TransformationSummary:
    return TransformationSummary(id=t.id, title=t.title, backends=list(t.backends), devices=list(t.devices),
                                 tags=list(t.tags), extends=t.extends, summary=t.summary)



def _text_reader(item: Transformation) -> Callable[[], str]:
    def read() -> str:
        return item.raw_text()
    return read


OPTIMIZE_PROMPT = """Optimize the {problem} kernel on the {backend} backend ({dtype}, sizes {sizes}); goal: {goal}.

1. Call doctor to see which backends and devices this machine has.
2. Call start_session(problem="{problem}", backend="{backend}", dtype="{dtype}", sizes={{...}}). Read version 0's
   time and rate, and the yardstick start_session names: the vendor baseline where the problem has one, % of the
   device's peak or bandwidth where those are known; where neither is (a CPU Vulkan device such as lavapipe),
   there is none: compare versions with each other.
3. Call list_transformations(session_id=<the session>) (texts for its problem, backend, dtype and device) and read
   the candidates' summaries; fetch full texts with get_transformation(transformation, backend, device) when unsure.
4. Apply one transformation at a time: apply_transformation(session_id, id). If your client cannot sample, the
   tool returns a brief; rewrite the kernel as it says and call submit_kernel(session_id, source,
   transformation=id). Before each step, predict what should move (time, TFLOP/s) and why.
5. Read the report: a failed attempt names the failing check and gives numbers; fix and resubmit. A version
   right only at the session's sizes is not_general, no success. Head moves to every general version, slower
   ones too; every report names best (the fastest general version): revert(session_id, best) moves head back.
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
