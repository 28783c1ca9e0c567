"""What a client reads: model results made lean for an LLM's context, valid against the tools' output schemas.

Fields left at their defaults are dropped (the schemas mark them optional) and floats keep 4 significant digits
(timings vary more than that from run to run). The text block is a summary of the record (summaries.py): the facts
a next step depends on, for clients and LLMs that read only text; structuredContent is the record.

One rule for every tool: a long part (a kernel's source, a diff, a compile log, a transformation's text, a brief,
an ABI, the session's rules) is said once in each of the two views, whole: in the text after the summary, under a
line naming it (LONG_PARTS), and in the structured content as its field. Hosts give the model one view, not both:
Claude Desktop, claude.ai and ChatGPT the text; Claude Code and VS Code only the structured content when there is
one (anthropics/claude-code#55677, #79944), as the spec intends (structuredContent for clients that read it, the
text "for backwards compatibility"). A long part left out of either view is lost to the agents of those hosts (an
agent in Claude Code saw `source_chars: 5227` and no source); what an agent pays is one view's size.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import mcp.types as types
from pydantic import BaseModel

SIGNIFICANT = 4
# Instants (Unix seconds), not measurements: to 4 digits a tune's `at` read 1796000000, 15 hours off (agent46).
INSTANTS = frozenset({"at", "created_at"})


def rounded(value: Any) -> Any:
    """`value` with every float rounded to SIGNIFICANT significant digits, recursively (INSTANTS to the second)."""
    if isinstance(value, float):
        if value == 0 or not math.isfinite(value):
            return value
        return round(value, SIGNIFICANT - 1 - math.floor(math.log10(abs(value))))
    if isinstance(value, dict):
        return {k: round(v) if k in INSTANTS and isinstance(v, float) and math.isfinite(v) else rounded(v)
                for k, v in value.items()}
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
        body += "".join(f"\n\n{header}:\n{part}" for header, part in long_parts(kind, structured))
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


_PROBLEM = (("abi", _abi), ("abi_by_dtype", _abi), ("annotation", _named("Annotation")), ("definition", _computes))
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


def long_parts(kind: str, structured: dict[str, Any]) -> list[tuple[str, str]]:
    """The long parts of an answer as (header, text), in the order the text gives them after its summary."""
    parts: list[tuple[str, str]] = []
    for path, header in LONG_PARTS.get(kind, ()):
        *above, field = path.split(".")
        for holder in _holders(structured, above):
            parts += [(header(holder, keys), text) for keys, text in _leaves(holder.get(field))]
    return parts


def whole_answer(tool: str, answer: types.CallToolResult) -> dict[str, Any]:
    """A tool answer's record: its structured content, which holds every long part (the text repeats them)."""
    return dict(answer.structured_content or {})
