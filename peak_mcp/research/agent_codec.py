"""One model request of `peak-mcp agent` as data a person can read, and a reply as text: the exchange model writes
requests this way, the recorder writes every exchange this way (exchanges.jsonl), and the replay model reads the
replies back. A reply is either plain text (the agent's last word, or a sampled kernel) or JSON
{"tool_calls": [{"name": ..., "args": {...}}], "text": optional}."""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field
from pydantic_ai.messages import ModelMessage, ModelResponse, ModelResponsePart, TextPart, ToolCallPart
from pydantic_ai.tools import ToolDefinition

from peak_mcp.research.exchanges import Cell, Request

REPLY_FORMAT = ('Write reply-<n>.txt as plain text (your final answer, or the kernel a sampling request asks for), or '
                'as JSON {"tool_calls": [{"name": "<tool>", "args": {...}}], "text": "optional"} to call tools '
                "from `tools`.")
LABEL = "agent"  # every agent exchange's Cell.model, so a recording replays whatever model made it


class AgentRequest(Request):
    """The research Request (system prompt, messages as role/text, max tokens) with the tools the model may call."""

    tools: list[dict[str, Any]] = Field(default_factory=list, description="name, description, parameters")
    reply_format: str = REPLY_FORMAT


def cell(n: int) -> Cell:
    """The n-th model request of a run (agent turns and sampling requests counted together)."""
    return Cell(model=LABEL, transformation=LABEL, repeat=n)


def request_of(messages: list[ModelMessage], instructions: str | None, tools: list[ToolDefinition],
               max_tokens: int | None) -> AgentRequest:
    rendered = [line for message in messages for line in _lines(message)]
    return AgentRequest(system_prompt=instructions, messages=rendered, max_tokens=max_tokens or 0,
                        tools=[{"name": t.name, "description": t.description or "",
                                "parameters": t.parameters_json_schema} for t in tools])


def _lines(message: ModelMessage) -> list[dict[str, str]]:
    lines = []
    for part in message.parts:
        kind = part.part_kind
        if kind == "tool-call":
            lines.append({"role": "assistant", "text": json.dumps(
                {"tool_call": part.tool_name, "id": part.tool_call_id, "args": part.args_as_dict()})})
        elif kind in ("text", "system-prompt", "user-prompt"):
            content = part.content if isinstance(part.content, str) else json.dumps(part.content, default=str)
            role = {"text": "assistant", "system-prompt": "system"}.get(kind, "user")
            lines.append({"role": role, "text": content})
        elif hasattr(part, "model_response_str"):  # a tool's answer (or its failure)
            lines.append({"role": "tool", "text": f"{part.tool_name} (call {part.tool_call_id}) returned:\n"
                                                  f"{part.model_response_str()}"})
        elif hasattr(part, "model_response"):  # a retry prompt: what was wrong with the last reply
            lines.append({"role": "user", "text": part.model_response()})
    return lines


def reply_text(response: ModelResponse) -> str:
    """A model's response as a reply file would hold it (plain text where there are no tool calls)."""
    calls = [{"name": p.tool_name, "args": p.args_as_dict()} for p in response.parts if isinstance(p, ToolCallPart)]
    text = "".join(p.content for p in response.parts if isinstance(p, TextPart))
    if not calls:
        return text
    return json.dumps({"tool_calls": calls, **({"text": text} if text else {})}, indent=2)


class BadReply(ValueError):
    pass


def parts_of(reply: str) -> list[ModelResponsePart]:
    """A reply's text as response parts: JSON with tool_calls, else the text itself."""
    stripped = reply.strip()
    found: Any = None
    if stripped.startswith("{"):
        try:
            found = json.loads(stripped)
        except ValueError:
            found = None
    if not isinstance(found, dict) or "tool_calls" not in found:
        return [TextPart(content=reply)]
    parts: list[ModelResponsePart] = [TextPart(content=found["text"])] if found.get("text") else []
    for call in found["tool_calls"] or []:
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise BadReply(f"a tool call needs a name and args: {call!r}")
        parts.append(ToolCallPart(tool_name=call["name"], args=call.get("args") or {}))
    return parts
