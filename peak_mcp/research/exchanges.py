"""What passes between the server and a model: one sampling request as data, its key for replay, and the recorder
that writes every exchange of a run to a JSONL (the file the replay backend reads back)."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import mcp.types as types
from pydantic import BaseModel, Field


class Request(BaseModel):
    """One createMessage request of the server, as a model backend reads it."""

    system_prompt: str | None = None
    messages: list[dict[str, str]] = Field(description="[{role, text}], in order")
    max_tokens: int

    @classmethod
    def from_params(cls, params: types.CreateMessageRequestParams) -> Request:
        messages = [{"role": m.role, "text": getattr(m.content, "text", "") or ""} for m in params.messages]
        return cls(system_prompt=params.system_prompt, messages=messages, max_tokens=params.max_tokens)

    @property
    def key(self) -> str:
        """sha256 of the request's text: the replay backend's second lookup."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()

    @property
    def chars(self) -> int:
        return len(self.system_prompt or "") + sum(len(m["text"]) for m in self.messages)


class Cell(BaseModel):
    """Where a request belongs in the plan: the replay backend's first lookup (a brief quotes times measured on
    its run, so a re-run's text differs even where the plan is the same)."""

    model: str
    transformation: str
    repeat: int
    attempt: int = 1
    sequence: int | None = None  # a sequence run's: which sequence of the plan (from 1) and which step of it
    step: int | None = None

    @property
    def coordinates(self) -> tuple[str, str, int, int, int | None, int | None]:
        return (self.model, self.transformation, self.repeat, self.attempt, self.sequence, self.step)


class Reply(BaseModel):
    text: str
    tokens: int | None = None  # where a backend sees them; the exchange and replay backends see characters only
    note: str | None = None  # how it was found (replay: by hash or by cell)


class Exchange(BaseModel):
    """One line of a run's exchanges.jsonl."""

    key: str
    cell: Cell
    request: Request
    reply: str | None
    reply_tokens: int | None = None
    error: str | None = None  # the backend gave no reply (timeout, nothing recorded): the server records a decline
    seconds: float
    note: str | None = None


Backend = Callable[[Request, Cell], Awaitable[Reply]]


class Recorder:
    """The sampling callback an MCP client is given: numbers the attempts of the current cell, asks the backend,
    and appends every exchange to a JSONL."""

    def __init__(self, backend: Backend, path: Path) -> None:
        self.backend, self.path = backend, path
        self.cell: Cell | None = None
        self.exchanges: list[Exchange] = []  # the current cell's
        path.parent.mkdir(parents=True, exist_ok=True)

    def begin(self, model: str, transformation: str, repeat: int, sequence: int | None = None,
              step: int | None = None) -> None:
        self.cell = Cell(model=model, transformation=transformation, repeat=repeat, attempt=0, sequence=sequence,
                         step=step)
        self.exchanges = []

    async def __call__(self, context: Any,
                       params: types.CreateMessageRequestParams) -> types.CreateMessageResult | types.ErrorData:
        if self.cell is None:
            raise RuntimeError("a sampling request outside an experiment cell")
        self.cell = self.cell.model_copy(update={"attempt": self.cell.attempt + 1})
        request = Request.from_params(params)
        started = time.monotonic()
        try:
            reply = await self.backend(request, self.cell)
        except Exception as exc:  # refused as MCP says (ErrorData): the exchange and the cell say why
            error = f"{type(exc).__name__}: {exc}"
            self._keep(Exchange(key=request.key, cell=self.cell, request=request, reply=None, error=error,
                                seconds=time.monotonic() - started))
            return types.ErrorData(code=types.INTERNAL_ERROR, message=error)
        self._keep(Exchange(key=request.key, cell=self.cell, request=request, reply=reply.text,
                            reply_tokens=reply.tokens, seconds=time.monotonic() - started, note=reply.note))
        return types.CreateMessageResult(role="assistant", model=self.cell.model,
                                         content=types.TextContent(type="text", text=reply.text))

    def _keep(self, exchange: Exchange) -> None:
        self.exchanges.append(exchange)
        with self.path.open("a") as out:
            out.write(exchange.model_dump_json() + "\n")


def read_exchanges(path: Path) -> list[Exchange]:
    """A recorded run's exchanges; a torn last line (a crash mid-write) is skipped."""
    found = []
    for line in path.read_text().splitlines():
        try:
            found.append(Exchange.model_validate(json.loads(line)))
        except ValueError:
            continue
    return found
