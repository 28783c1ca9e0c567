"""apply_transformation: the client's LLM rewrites the kernel (MCP sampling, or input-required rounds)."""

from __future__ import annotations

import warnings
from typing import Annotated, Any

import mcp.types as types
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from peak_mcp.api.responses import result, rounded
from peak_mcp.api.summaries import summary
from peak_mcp.api.tools.common import RECORDS, SessionId, VersionNumber, call
from peak_mcp.loop.apply import MAX_INSTRUCTIONS_CHARS, Applier
from peak_mcp.loop.models import ApplyStep
from peak_mcp.loop.service import PeakService

SAMPLING_MAX_TOKENS = 16384


def register(mcp: MCPServer, service: PeakService, applier: Applier) -> None:
    """apply_transformation, by sampling or by input-required rounds."""

    @mcp.tool(annotations=RECORDS)
    async def apply_transformation(
        ctx: Context,
        session_id: SessionId,
        transformation: Annotated[str, Field(description="catalog id, see list_transformations")],
        version: Annotated[VersionNumber | None, Field(description="version to transform (default: head)")] = None,
        instructions: Annotated[str | None, Field(
            description=f"extra guidance for the LLM, at most {MAX_INSTRUCTIONS_CHARS} characters")] = None,
        max_attempts: Annotated[int | None, Field(strict=True, ge=1, le=10,
                                                  description="attempts before giving up, 1-10 (default 3)")] = None,
        exact: Annotated[bool, Field(description="this id's own text, not its specialization for the "
                                                 "session")] = False,
    ) -> Annotated[types.CallToolResult, ApplyStep] | types.InputRequiredResult:
        """Have the client's LLM apply a transformation (MCP sampling), then compile, validate and benchmark,
        retrying with the compiler or validation feedback. Without sampling it returns the brief: rewrite the
        kernel yourself and call submit_kernel with transformation set. A declined sampling request leaves the run
        open with its attempts recorded (history); submit_kernel with transformation set answers it."""
        capabilities = ctx.client_capabilities
        if capabilities is None or capabilities.sampling is None:
            step = await call(ctx, applier.begin, session_id, transformation, version, instructions, max_attempts,
                              exact)
            # "The brief" must say where it is: the structured answer carries only its length (brief: null).
            step.message = ("this client does not offer MCP sampling: rewrite the kernel as the brief says (the text "
                            "answer, after 'brief:'; the structured one gives only its length), then "
                            f"call submit_kernel(session_id={session_id!r}, source=..., "
                            f"transformation={transformation!r}); that submission is recorded as this run's attempt")
            return _answer(step)
        if ctx.protocol_version is not None and ctx.protocol_version >= "2026-07-28":
            return await _apply_by_rounds(ctx, session_id, transformation, version, instructions, max_attempts,
                                          exact)
        step = await call(ctx, applier.begin, session_id, transformation, version, instructions, max_attempts, exact)
        while not step.done:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # sampling is deprecated in the 2026-07-28 spec, live before it
                    reply = await ctx.session.create_message(
                        messages=[_user_message(step.brief or "")], system_prompt=step.system_prompt,
                        max_tokens=SAMPLING_MAX_TOKENS)
            except Exception as exc:  # declined by the user, or the client's LLM failed: the attempts stand
                return _answer(await call(None, applier.declined, step.run_id, str(exc) or type(exc).__name__))
            step = await call(ctx, applier.answer, step.run_id, _reply_text(reply), progress=None)
        return _answer(step)

    async def _apply_by_rounds(ctx: Context, session_id: SessionId, transformation: str, version: int | None,
                               instructions: str | None, max_attempts: int | None, exact: bool) -> Any:
        """2026-07-28 clients: each LLM call is an input-required round; the run id rides request_state."""
        state = ctx.request_state
        if state is None:
            step = await call(ctx, applier.begin, session_id, transformation, version, instructions, max_attempts,
                              exact)
        else:
            run_id, _, attempt = state.partition(":")
            run = await call(None, service.store.apply_run, run_id)
            if run.session_id != session_id or run.transformation != transformation:
                raise ToolError("request_state does not belong to this call; start apply_transformation again")
            response = (ctx.input_responses or {}).get(f"attempt-{attempt}")
            if response is None:
                step = await call(None, applier.step, run_id)
            else:
                step = await call(ctx, applier.answer, run_id, _reply_text(response), progress=None)
        if step.done:
            return _answer(step)
        request = types.CreateMessageRequest(params=types.CreateMessageRequestParams(
            messages=[_user_message(step.brief or "")], system_prompt=step.system_prompt,
            max_tokens=SAMPLING_MAX_TOKENS))
        return types.InputRequiredResult(input_requests={f"attempt-{step.attempt}": request},
                                         request_state=f"{step.run_id}:{step.attempt}")

    # --- resources and prompts -------------------------------------------------------------------------------


def _answer(step: ApplyStep) -> types.CallToolResult:
    """The step, its brief whole in the text after the summary and in the record (responses.py: a host gives its
    model one of the two)."""
    return result(step, text=summary("ApplyStep", rounded(step.model_dump(mode="json"))), defaults=True)


def _user_message(text: str) -> types.SamplingMessage:
    return types.SamplingMessage(role="user", content=types.TextContent(type="text", text=text))


def _reply_text(result: Any) -> str:
    content = getattr(result, "content", None)
    items = content if isinstance(content, list) else [content]
    return "\n".join(getattr(c, "text", "") for c in items if c is not None)
