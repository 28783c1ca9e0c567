"""What a client reads: model results made lean for an LLM's context, valid against the tools' output schemas.

Fields left at their defaults are dropped (the schemas mark them optional) and floats keep 4 significant digits
(timings vary more than that from run to run). The text block is a summary of the record (summaries.py): the facts
a next step depends on, for clients and LLMs that read only text; structuredContent is the record.

One rule for every tool: a long part (a kernel's source, a diff, a compile log, a transformation's text, a brief,
an ABI, the session's rules) is said once, whole, in the text, after the summary, under a line naming it
(LONG_PARTS); the structured content gives in its place its length (`<field>_chars`), and `whole()` puts it back.
Why the text: hosts give the model one of the two, and the text is what MCP's content is for (the spec's
structuredContent is for programs, with a text copy "for backwards compatibility"). Claude Desktop, claude.ai and
ChatGPT give the model the text; Claude Code and VS Code give it only the structured content when there is one
(anthropics/claude-code#55677, #79944): they see each answer's facts and the long part's length, not the part.
Saying it in both doubled the answers (a 14K brief twice) for every host that reads both.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import mcp.types as types
from pydantic import BaseModel, Field, create_model

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
    kind = kind or type(model).__name__
    body = text if text is not None else summary(kind, structured)
    if text is None:
        structured, parts = said_once(kind, structured)
        body += "".join(f"\n\n{header}:\n{part}" for header, part in parts)
    return types.CallToolResult(content=[types.TextContent(type="text", text=body), *extra],
                                structured_content=structured)


# Which fields of an answer are long parts, and the line that names each one in the text (given the record that
# holds the field and the keys below it, for a part that is a dict of texts). A path's `*` is every item of a list.
Header = Callable[[dict[str, Any], tuple[str, ...]], str]


def _named(label: str) -> Header:
    return lambda _record, keys: " ".join((label, *keys))


def _abi(record: dict[str, Any], keys: tuple[str, ...]) -> str:
    if len(keys) == 1:  # `abi`: each backend's, for its first dtype
        return f"ABI {keys[0]} {(record.get('dtypes_by_backend') or {}).get(keys[0], ['?'])[0]}"
    return f"ABI {' '.join(keys)}"


_COMPILE_LOG = ("compile.log", _named("compile log"))
def _computes(record: dict[str, Any], _keys: tuple[str, ...]) -> str:
    return f"What {record.get('problem') or record.get('name')} computes (its own definition)"


_PROBLEM = (("abi", _abi), ("abi_by_dtype", _abi), ("definition", _computes))
LONG_PARTS: dict[str, tuple[tuple[str, Header], ...]] = {
    "VersionReport": (_COMPILE_LOG,), "Submission": (_COMPILE_LOG,),
    "VersionDetail": (("report.compile.log", _named("compile log")), ("source", _named("source"))),
    "DiffReport": (("diff", _named("diff")),),
    "TransformationText": (("body", _named("text")),),
    "SessionInfo": (("version_0.compile.log", _named("compile log")), ("brief", _named("brief")),
                    ("abi", lambda r, _k: f"ABI ({r.get('backend')}, {r.get('dtype')})"), ("definition", _computes),
                    ("rules", _named("Rules of this session"))),
    "ProblemInfo": _PROBLEM,
    "ProblemList": tuple((f"problems.*.{path}", header) for path, header in _PROBLEM),
}


# Fields the summary gives inline, on their item's line (list_transformations: `id: title [backends]: summary`):
# left out of the structured content, with no length (each is a sentence or two; whole() cannot take them back).
INLINE_PARTS: dict[str, tuple[str, ...]] = {"TransformationList": ("transformations.*.summary",)}


def _holders(record: Any, path: list[str]) -> list[dict[str, Any]]:
    """The dicts that hold the last field of `path`, in order."""
    if not path:
        return [record] if isinstance(record, dict) else []
    head, rest = path[0], path[1:]
    if head == "*":
        return [h for item in record for h in _holders(item, rest)] if isinstance(record, list) else []
    return _holders(record.get(head), rest) if isinstance(record, dict) else []


def _leaves(value: Any, keys: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str]]:
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _leaves(v, (*keys, k))]
    return [(keys, value)] if isinstance(value, str) and value else []


def _lengths(value: Any) -> Any:
    return {k: _lengths(v) for k, v in value.items()} if isinstance(value, dict) else len(value)


def said_once(kind: str, structured: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """`structured` without its long parts (each replaced by `<field>_chars`), and the parts as (header, text) in
    the order the text gives them."""
    structured = json_copy(structured)
    parts: list[tuple[str, str]] = []
    for path, header in LONG_PARTS.get(kind, ()):
        *above, field = path.split(".")
        for holder in _holders(structured, above):
            value = holder.get(field)
            if not _leaves(value):
                continue
            parts += [(header(holder, keys), text) for keys, text in _leaves(value)]
            holder[f"{field}_chars"] = _lengths(value)
            del holder[field]
    for path in INLINE_PARTS.get(kind, ()):
        *above, field = path.split(".")
        for holder in _holders(structured, above):
            holder.pop(field, None)
    return structured, parts


def whole(kind: str, text: str, structured: dict[str, Any]) -> dict[str, Any]:
    """A client's inverse of said_once: the structured content of an answer of model `kind` with each long part
    taken back from the text (by its header and `<field>_chars`)."""
    structured, at = json_copy(structured), 0

    def take(header: str, length: int) -> str:
        nonlocal at
        start = text.index(f"\n\n{header}:\n", at) + len(header) + 4
        at = start + length
        return text[start:at]

    def rebuild(holder: dict[str, Any], shape: Any, keys: tuple[str, ...], header: Header) -> Any:
        if isinstance(shape, dict):
            return {k: rebuild(holder, v, (*keys, k), header) for k, v in shape.items()}
        return take(header(holder, keys), shape)

    for path, header in LONG_PARTS.get(kind, ()):
        *above, field = path.split(".")
        for holder in _holders(structured, above):
            shape = holder.pop(f"{field}_chars", None)
            if shape is not None:
                holder[field] = rebuild(holder, shape, (), header)
    return structured


def json_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(v) for v in value]
    return value


# The tools whose answers have long parts, by the model their answer is (a client's whole() needs the kind).
TOOL_KINDS = {"get_version": "VersionDetail", "diff": "DiffReport", "get_transformation": "TransformationText",
              "start_session": "SessionInfo", "submit_kernel": "Submission", "revert": "VersionReport",
              "list_problems": "ProblemList", "define_problem": "ProblemInfo"}


def whole_answer(tool: str, answer: types.CallToolResult) -> dict[str, Any]:
    """A tool answer's structured content with its long parts back in it, as the record was before said_once."""
    text = "".join(c.text for c in answer.content[:1] if isinstance(c, types.TextContent))
    kind = TOOL_KINDS.get(tool)
    return whole(kind, text, answer.structured_content or {}) if kind else dict(answer.structured_content or {})


def answer_model(model: type[BaseModel]) -> type[BaseModel]:
    """`model` as its answer's schema: each top-level long part optional (it is in the text), with its length."""
    fields: dict[str, Any] = {}
    for path, _header in LONG_PARTS.get(model.__name__, ()):
        if "." in path or path not in model.model_fields:
            continue
        fields[path] = (model.model_fields[path].annotation | None, None)
        fields[f"{path}_chars"] = (int | dict[str, Any] | None, Field(
            None, description=f"the length of {path}, which the text gives whole under its header"))
    return create_model(model.__name__, __base__=model, **fields)
