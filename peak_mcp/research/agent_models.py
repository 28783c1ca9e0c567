"""The model that drives `peak-mcp agent`, from its --model string: any pydantic-ai model string ('openai:gpt-4o',
'anthropic:claude-...', 'openai-chat:NAME' with --base-url for an OpenAI-compatible local server), 'test'
(pydantic-ai's TestModel: calls the read-only `history` tool, then stops), 'exchange:DIR' (a person or another
program answers request-<n>.json with reply-<n>.txt, through research/exchange.py) or 'replay:FILE' (the replies of a
recorded exchanges.jsonl, through research/replay.py). Whatever it is, Recording wraps it so that every exchange of
the run lands in exchanges.jsonl, the file replay: reads."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from pydantic_ai.messages import InstructionPart, ModelMessage, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters, infer_model
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from peak_mcp.research.agent_codec import cell, parts_of, reply_text, request_of
from peak_mcp.research.exchange import FolderExchange
from peak_mcp.research.exchanges import Backend, Exchange
from peak_mcp.research.replay import Replay


def backend_model(backend: Backend, name: str, turns: int = 0) -> FunctionModel:
    """A pydantic-ai model whose every request goes to a research backend (folder exchange or replay) as an
    AgentRequest, numbered in order (after `turns` answered in earlier parts of a resumed run), and whose reply text
    becomes the response (text or tool calls)."""

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal turns
        turns += 1
        max_tokens = (info.model_settings or {}).get("max_tokens")
        request = request_of(messages, info.instructions, info.function_tools, max_tokens)
        reply = await backend(request, cell(turns))
        return ModelResponse(parts=parts_of(reply.text))

    return FunctionModel(answer, model_name=name)


class Recording(WrapperModel):
    """Appends every request and its reply to a JSONL as research Exchange lines (the replay backend's input)."""

    def __init__(self, wrapped: Model, path: Path | None, turns: int = 0) -> None:
        super().__init__(wrapped)
        self.path, self.turns = path, turns  # a resumed run's cells count on from its earlier parts'
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    async def request(self, messages: list[ModelMessage], model_settings: ModelSettings | None,
                      model_request_parameters: ModelRequestParameters) -> ModelResponse:
        self.turns += 1
        started = time.monotonic()
        response = await self.wrapped.request(messages, model_settings, model_request_parameters)
        if self.path is not None:
            parts = model_request_parameters.instruction_parts
            instructions = InstructionPart.join(parts) if parts else next(
                (m.instructions for m in reversed(messages) if getattr(m, "instructions", None)), None)
            request = request_of(messages, instructions, model_request_parameters.function_tools,
                                 (model_settings or {}).get("max_tokens"))
            exchange = Exchange(key=request.key, cell=cell(self.turns), request=request, reply=reply_text(response),
                                reply_tokens=response.usage.output_tokens or None,
                                seconds=round(time.monotonic() - started, 3), note=self.wrapped.model_name)
            line = {**exchange.model_dump(mode="json"), "request": request.model_dump(mode="json")}  # with tools
            with self.path.open("a") as out:
                out.write(json.dumps(line) + "\n")
        return response


def make_model(spec: str, base_url: str | None = None, exchange_timeout_s: float = 3600.0,
               exchange_start: int | None = None, turns: int = 0, run: str | None = None) -> Model:
    """exchange_start and turns resume a run: its pending exchange number, and the requests answered before; `run`
    tags its exchange requests."""
    kind, _, rest = spec.partition(":")
    if spec == "test":
        return TestModel(call_tools=["history"], custom_output_text="done (TestModel)")
    if kind == "exchange" and rest:
        exchange = FolderExchange(Path(rest), timeout_s=exchange_timeout_s, start=exchange_start, run=run)
        return backend_model(exchange, spec, turns)
    if kind == "replay" and rest:
        if not Path(rest).is_file():
            raise ValueError(f"replay needs a recorded exchanges.jsonl: {rest} is not a file")
        return backend_model(Replay(Path(rest)), spec, turns)
    if base_url and kind in ("openai", "openai-chat"):
        # Local OpenAI-compatible servers (vLLM, llama.cpp, Ollama) speak chat completions, not the Responses API
        # that 'openai:' means to pydantic-ai; a key is required by the client even where the server ignores it.
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        provider = OpenAIProvider(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY") or "none")
        return OpenAIChatModel(rest, provider=provider)
    return infer_model(spec)
