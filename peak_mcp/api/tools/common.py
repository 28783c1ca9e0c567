"""What every tool group shares: running a domain call from a tool, argument types, annotations."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
import mcp.types as types
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from peak_mcp.backends.registry import BACKENDS
from peak_mcp.core.errors import PeakError
from peak_mcp.runner.pool import cancellation

T = TypeVar("T")
# Hints for clients that ask before calling: nothing here deletes, and nothing reaches beyond this machine.
READ_ONLY = types.ToolAnnotations(read_only_hint=True, open_world_hint=False)
RUNS_ONLY = types.ToolAnnotations(read_only_hint=True, idempotent_hint=False, open_world_hint=False)  # runs kernels
RECORDS = types.ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                open_world_hint=False)
MOVES_HEAD = types.ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                   open_world_hint=False)
BACKEND = Field(description="cuda, hip or hlsl", json_schema_extra={"enum": sorted(BACKENDS)})
DTYPE = Field(description="f32, f16 or bf16: the inputs' element type (the session's ABI says each output's "
                          "type and how the kernel accumulates)",
              json_schema_extra={"enum": ["f32", "f16", "bf16"]})
# Strict: JSON true is not 1. Bounded: SQLite integers are 64-bit, and a version number past them is no version.
VersionNumber = Annotated[int, Field(strict=True, ge=0, le=2**31 - 1)]
Size = Annotated[int, Field(strict=True)]  # the problem checks the range and says which symbol is wrong
SessionId = Annotated[str, Field(description="from start_session or list_sessions")]
Version = Annotated[VersionNumber | None, Field(description="a version number from history (default: head)")]


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
