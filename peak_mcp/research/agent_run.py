"""`peak-mcp agent`'s run: connect to the server through pydantic-ai's MCP toolset (a stdio child or a URL), start
the session, and let the model call the server's tools until a stop rule holds. The model also answers the server's
sampling requests (apply_transformation asks the client's LLM to write the kernel). The command, not the model,
keeps the budget: after every call that can make versions it reads history; once a rule holds, further calls
that make versions are refused and the run ends at its next step; past the time budget plus a grace the run is
cancelled outright. Tools outside the one session (start_session, define_problem, list_sessions) are hidden, and
every call is pinned to the session. With an exchange that does not wait, a missing reply stops the run: it returns
its AgentState, and a later process resumes it from there (research/agent_state.py)."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from pydantic_ai import Agent, UsageLimits
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.models import Model
from pydantic_ai.usage import RunUsage

from peak_mcp.research.agent_budget import Tracker, Tried, short_args
from peak_mcp.research.agent_report import AgentReport, build
from peak_mcp.research.agent_state import AgentPlan, AgentState, dump_messages
from peak_mcp.research.exchange import Waiting

__all__ = ["AgentError", "AgentPlan", "AgentState", "run_agent", "stdio_toolset", "url_toolset"]

HIDDEN = frozenset({"start_session", "define_problem", "list_sessions"})
MAKES_VERSIONS = frozenset({"submit_kernel", "apply_transformation", "tune"})
HARD_GRACE_S = 300.0  # past --max-minutes, calls in flight get this long before the run is cancelled
ABOUT_CHARS = 6000  # of the session's ABI, rules and definition quoted in the instructions
PROMPT = "Make the kernel as fast as you can within the budget."
APPLY_SAMPLING = "apply_transformation has the server ask you (by sampling) for the transformed kernel and checks it"
APPLY_BRIEF = ("apply_transformation returns the brief for the transformed kernel: write that kernel and "
               "submit_kernel it with the transformation set")


class AgentError(RuntimeError):
    pass


async def _structured(toolset: MCPToolset, name: str, args: dict[str, Any]) -> dict[str, Any]:
    answer = await toolset.client.call_tool(name, args, raise_on_error=False)
    if answer.is_error:
        text = " ".join(getattr(c, "text", "") for c in answer.content)
        raise AgentError(f"{name} failed: {text}")
    return answer.structured_content or {}


def instructions(session: dict[str, Any], plan: AgentPlan) -> str:
    b = plan.budget
    limits = [f"{b.max_versions} new versions" if b.max_versions else "",
              f"{b.max_minutes:g} minutes" if b.max_minutes else "",
              f"stop at {b.target_percent:g}% of the roofline (or vendor library)" if b.target_percent else ""]
    v0 = session.get("version_0") or {}
    about = "\n\n".join(f"{k}:\n{session[k]}" for k in ("definition", "abi", "rules", "brief") if session.get(k))
    return (
        f"You optimize a GPU kernel through the peak-mcp server's tools. Your session is {session['session_id']} "
        f"(problem {plan.problem}, backend {plan.backend}, dtype {plan.dtype}, sizes {session.get('sizes')}, device "
        f"{(session.get('device') or {}).get('name', '?')}); every tool call is made in it. Version 0: "
        + (f"{v0.get('status', '?')} {v0.get('message') or ''}".strip() if v0 else "none yet: your first kernel "
           "becomes v0") + ".\n"
        f"Budget: {', '.join(x for x in limits if x) or 'none'}; the client stops you when it is spent.\n"
        "Work in steps: suggest_next ranks catalog transformations for the head; get_transformation gives one's "
        "text; " + (APPLY_SAMPLING if plan.sampling else APPLY_BRIEF) + ", "
        "or write a kernel yourself and submit_kernel it; tune searches a kernel's `// peak: params`; history shows "
        "every version with its time. Every version made counts against the budget, failed ones too; only one that "
        "passes its checks can be the best. When you see no further gain, "
        "answer with a short summary instead of a tool call.\n\n" + about[:ABOUT_CHARS])


async def run_agent(plan: AgentPlan, model: Model, connect: Callable[..., MCPToolset],
                    progress: Callable[[str], None] = lambda line: None,
                    resume: AgentState | None = None) -> AgentReport | AgentState:
    """connect(**toolset_kwargs) builds the MCPToolset for the server (stdio child or URL). Returns the report, or
    the state to resume from where the model's reply is not there yet (an exchange that does not wait). `resume`
    goes on from such a state in the same session: no new session, the same instructions, the saved history."""
    # the time budget counts the session's start too, and the time of the run's earlier parts
    began = time.monotonic() - (resume.seconds if resume else 0.0)
    tracker: Tracker | None = None
    session_tools: set[str] = set()
    session_id = ""
    # Calls that make versions run one at a time (pydantic-ai runs a response's tool calls concurrently), so each
    # one is checked against the budget the one before it left; the server queues them per device anyway.
    one_at_a_time = anyio.Lock()

    async def guard(ctx: Any, call_tool: Callable[..., Any], name: str, args: dict[str, Any]) -> Any:
        if name not in MAKES_VERSIONS:
            return await checked(call_tool, name, args)
        async with one_at_a_time:
            return await checked(call_tool, name, args)

    async def checked(call_tool: Callable[..., Any], name: str, args: dict[str, Any]) -> Any:
        assert tracker is not None
        if name in session_tools:
            args = {**args, "session_id": session_id}
        tried = Tried(tool=name, args=short_args(args), seconds=0.0)
        tracker.tried.append(tried)
        if name in MAKES_VERSIONS and (reason := tracker.stop_reason()):
            tried.refused = reason
            return f"Not run: the client's budget stopped the session ({reason}). Answer with your summary."
        called = time.monotonic()
        try:
            answer = await call_tool(name, args)
        except Exception as exc:  # ToolFailed: the model sees the error; the log keeps it
            tried.error = str(exc)[:300]
            raise
        finally:
            tried.seconds = round(time.monotonic() - called, 2)
        if name in MAKES_VERSIONS or name == "revert":
            new = tracker.observe(await _structured(toolset, "history", {"session_id": session_id}))
            tried.versions = [{k: r.get(k) for k in ("version", "status", "failure", "median_ms", "speedup_vs_v0")
                               if r.get(k) is not None} for r in new]
            progress(f"{name}: " + (", ".join(f"v{v['version']} {v.get('status')}" for v in tried.versions)
                                    or "no new version") + f" ({tried.seconds:.0f} s)")
        return answer

    # The server's instructions (how its loop goes) are read: it is the server this command was pointed at.
    toolset = connect(sampling_model=model if plan.sampling else None, process_tool_call=guard,
                      tool_error_behavior="failed", include_instructions=True, init_timeout=120, read_timeout=1800)
    with warnings.catch_warnings():
        # pydantic-ai warns that a modern MCP session cannot sample; fastmcp answers the server's input-required
        # rounds with the sampling handler all the same (apply_transformation's kernels come back through it).
        warnings.filterwarnings("ignore", message=".*will never be called.*", category=UserWarning)
        await toolset.__aenter__()
    try:
        if resume is None:
            started = await _structured(toolset, "start_session", {
                "problem": plan.problem, "backend": plan.backend, "dtype": plan.dtype, "sizes": plan.sizes,
                "label": f"agent {plan.model}"[:80]})
            session_id, text = started["session_id"], instructions(started, plan)
            progress(f"session {session_id}: v0 {(started.get('version_0') or {}).get('status', 'none')}")
        else:
            session_id, text = resume.session_id, resume.instructions
        session_tools = {t.name for t in await toolset.list_tools()
                         if "session_id" in (t.input_schema or {}).get("properties", {})}
        try:
            history = await _structured(toolset, "history", {"session_id": session_id})
        except AgentError as exc:
            if resume is None:
                raise
            raise AgentError(f"the saved run's session {session_id} is not in this server's store ({exc}); resume "
                             "with the --data-dir (or --url) of the run that saved the state") from None
        tracker = Tracker(plan.budget, history, began)
        if resume is not None:  # the whole run's record: versions made and calls tried count from its first part
            tracker.at_start, tracker.tried = set(resume.at_start), list(resume.tried)
            progress(f"session {session_id}: part {resume.parts + 1}, from request {resume.pending}")
        agent = Agent(model, toolsets=[toolset.filtered(lambda ctx, tool: tool.name not in HIDDEN)],
                      instructions=text, retries=3)
        reason, final, requests = None, None, resume.requests if resume else 0
        part = resume.parts + 1 if resume else 1
        waiting: tuple[Waiting, list[Any]] | None = None
        hard = (plan.budget.max_minutes * 60 + HARD_GRACE_S) if plan.budget.max_minutes else float("inf")
        with anyio.move_on_after(max(hard - (time.monotonic() - began), 1.0)) as scope:
            try:
                # Resumed, the history ends with the request that waited and no new prompt: pydantic-ai sends
                # that request again (UserPromptNode), and the exchange answers it under its own number.
                async with agent.iter(None if resume else PROMPT,
                                      message_history=resume.history() if resume else None,
                                      usage=RunUsage(requests=requests),
                                      usage_limits=UsageLimits(request_limit=plan.max_requests)) as run:
                    try:
                        async for _node in run:
                            requests = run.usage.requests
                            if reason := tracker.stop_reason():
                                break
                    except Waiting as exc:  # the request stays in the history, unanswered
                        waiting, requests = (exc, run.all_messages()), run.usage.requests
                    if run.result is not None:
                        final = str(run.result.output)
                        reason = reason or "the model stopped by itself"
            except UsageLimitExceeded as exc:
                reason = f"request limit: {exc}"
            except Exception as exc:  # the model failed (no reply, an HTTP error, a reply that is no tool call)
                reason = f"model error: {type(exc).__name__}: {exc}"[:500]
        if scope.cancelled_caught:
            reason = f"cancelled {HARD_GRACE_S:g} s past the time budget"
        elif waiting is not None:
            exc, messages = waiting
            return AgentState(plan=plan, session_id=session_id, instructions=text, messages=dump_messages(messages),
                              at_start=sorted(tracker.at_start), tried=tracker.tried,
                              seconds=round(time.monotonic() - began, 2), requests=requests, turns=exc.turn - 1,
                              pending=exc.n, exchange=str(exc.folder), parts=part)
        tracker.observe(await _structured(toolset, "history", {"session_id": session_id}))
        return build(tracker, plan.model, reason or "stopped", requests, final, parts=part)
    finally:
        await toolset.__aexit__(None, None, None)


def stdio_toolset(data_dir: Path | None, env: dict[str, str] | None = None) -> Callable[..., MCPToolset]:
    """`python -m peak_mcp serve` as the toolset's stdio child, with this process's environment."""
    import os
    import sys

    from fastmcp.client.transports import StdioTransport

    args = ["-m", "peak_mcp"] + (["--data-dir", str(data_dir)] if data_dir else []) + ["serve"]

    def connect(**kwargs: Any) -> MCPToolset:
        # The child's stderr (its logs) is ours, unless ours is no file (a captured stream): then the process's.
        try:
            sys.stderr.fileno()
            errlog = sys.stderr
        except (AttributeError, OSError, ValueError):
            errlog = sys.__stderr__
        transport = StdioTransport(command=sys.executable, args=args, env=dict(env or os.environ),
                                   keep_alive=False, log_file=errlog)
        return MCPToolset(transport, **kwargs)

    return connect


def url_toolset(url: str, token: str | None) -> Callable[..., MCPToolset]:
    def connect(**kwargs: Any) -> MCPToolset:
        return MCPToolset(url, auth=token, **kwargs)

    return connect
