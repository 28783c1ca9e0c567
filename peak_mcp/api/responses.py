"""What a client reads: model results made lean for an LLM's context, valid against the tools' output schemas.

Fields left at their defaults are dropped (the schemas mark them optional) and floats keep 4 significant digits
(timings vary more than that from run to run). structuredContent is the whole record; the text block is a summary of
it (summaries.py): the facts a next step depends on, for clients and LLMs that read only text. It used to be the
same JSON again, which doubled every answer (the MCP spec's text copy of structured content is a SHOULD, for
clients that read only text: the summary serves them, with less to read).
"""

from __future__ import annotations

import math
from typing import Any

import mcp.types as types
from pydantic import BaseModel

SIGNIFICANT = 4


def rounded(value: Any) -> Any:
    """`value` with every float rounded to SIGNIFICANT significant digits, recursively."""
    if isinstance(value, float):
        if value == 0 or not math.isfinite(value):
            return value
        return round(value, SIGNIFICANT - 1 - math.floor(math.log10(abs(value))))
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def lean(model: BaseModel) -> dict[str, Any]:
    return rounded(model.model_dump(mode="json", exclude_defaults=True))


def result(model: BaseModel | dict[str, Any], *extra: types.ContentBlock, text: str | None = None,
           kind: str | None = None, defaults: bool = False) -> types.CallToolResult:
    """A tool result: lean structured content, its summary as text (or `text`), then `extra` blocks. A dict is
    structured content already; `kind` names its summary (default: the model's class name); `defaults` keeps the
    fields left at their defaults (apply_transformation's steps always carried them: `succeeded: false`)."""
    from peak_mcp.api.summaries import summary

    if isinstance(model, dict):
        structured = rounded(model)
    else:
        structured = rounded(model.model_dump(mode="json")) if defaults else lean(model)
    body = text if text is not None else summary(kind or type(model).__name__, structured)
    return types.CallToolResult(content=[types.TextContent(type="text", text=body), *extra],
                                structured_content=structured)
