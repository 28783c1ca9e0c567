"""The stdio transport, answering the lines it cannot read.

The SDK's stdio_server hands every line it fails to parse or validate (a lone surrogate escape, arrays nested past
the parser's depth, a JSON value that is no JSON-RPC message) to the session as an exception, which logs it and
answers nothing: the client waits out its own timeout. Over HTTP the same body gets `400 Parse error`. Here such a
line gets its JSON-RPC error at once, and the next line is served as usual. The SDK's transport is kept as it is
(it also points fd 0 and 1 away from the wire while serving); only its read stream is wrapped.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError
from pydantic import ValidationError

if TYPE_CHECKING:  # the SDK's stream protocols live in a private module: for the type checker only
    from mcp.shared._stream_protocols import ReadStream, WriteStream


def error_for(exc: Exception) -> JSONRPCError | None:
    """The reply to a line the transport could not read; None for a blank line, which is no message at all."""
    problems = exc.errors() if isinstance(exc, ValidationError) else []
    if problems and problems[0]["type"] == "json_invalid":
        if isinstance(problems[0].get("input"), str) and not problems[0]["input"].strip():
            return None
        return JSONRPCError(jsonrpc="2.0", id=None,
                            error=ErrorData(code=PARSE_ERROR, message="Parse error", data=problems[0]["msg"]))
    # Valid JSON, but no request, notification or response. Its id, where it has a usable one, lets the client
    # match the error to its call; otherwise null, as JSON-RPC says.
    found = next((p["input"].get("id") for p in problems if isinstance(p.get("input"), dict)), None)
    request_id = found if isinstance(found, str | int) and not isinstance(found, bool) else None
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(
        code=INVALID_REQUEST, message="Invalid Request",
        data="not a JSON-RPC 2.0 request, notification or response (one JSON object per line)"))


class AnsweringReadStream:
    """The SDK's read stream, less its exceptions: each is answered on the write stream and the next item read."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception], replies: WriteStream[SessionMessage]) -> None:
        self._inner = inner
        self._replies = replies

    @property
    def last_context(self) -> contextvars.Context | None:  # the dispatcher runs each message in its sender's context
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            reply = error_for(item)
            if reply is not None:
                await self._replies.send(SessionMessage(reply))

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> AnsweringReadStream:
        return self

    async def __anext__(self) -> SessionMessage:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> AnsweringReadStream:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()


async def serve_stdio(server: MCPServer) -> None:
    """What MCPServer.run_stdio_async does, with the answering read stream. The SDK offers no public hook for the
    low-level server it runs; `_lowlevel_server` is that server, and without it the SDK's own loop serves."""
    lowlevel = getattr(server, "_lowlevel_server", None)
    if lowlevel is None:
        await server.run_stdio_async()
        return
    async with stdio_server() as (read_stream, write_stream):
        await lowlevel.run(AnsweringReadStream(read_stream, write_stream), write_stream,
                           lowlevel.create_initialization_options())
