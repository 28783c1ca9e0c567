"""A text's Keep unchanged section against the kernel contract (ABI) of the session that reads it.

A text's example is written for one problem: coalesced-access keeps `bindings 0, 1, 2` and `M, N, K`, matmul's.
Those items hold for that problem only (a LayerNorm brief was told to keep matmul's signature). A brief, and
get_transformation for a session, state the session's own contract in their place; read without a session, the
section says whose contract its items are and that a session's own governs. Nothing here names a problem: whose
items they are is read from the problems' own argument names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from peak_mcp.catalog.transformations import Transformation
from peak_mcp.problems.base import Problem

KEEP_HEADING = "## Keep unchanged"
# A "Keep unchanged" item that names a kernel contract: a signature, bindings or push constants, an argument list.
_NAMES_ABI = re.compile(r"\b(?:signature|ABI|bindings?|push[- ]constants?|argument list)\b|`[^`]*\([^`]*,[^`]*\)`",
                        re.IGNORECASE)
_SECTION = re.compile(rf"^{re.escape(KEEP_HEADING)}[ \t]*\n(.*?)(?=^## |\Z)", re.MULTILINE | re.DOTALL)
_WORD = re.compile(r"[A-Za-z_]\w*")


def _items(text: str) -> list[list[str]]:
    """The section's items, each with its indented continuation lines."""
    items: list[list[str]] = []
    for line in text.rstrip("\n").splitlines():
        if items and (line[:1].isspace() and line.strip()):
            items[-1].append(line)
        else:
            items.append([line])
    return items


def contract_items(body: str) -> list[str]:
    """The Keep unchanged items that name a kernel contract, each as one line of text."""
    span = _SECTION.search(body)
    if span is None:
        return []
    return [" ".join(line.strip() for line in item) for item in _items(span.group(1))
            if _NAMES_ABI.search(" ".join(item))]


def _replace_contract(body: str, first: str) -> str:
    """`body` with its contract items replaced by `first` (one item, maybe several lines); unchanged when the
    section names no contract."""
    span = _SECTION.search(body)
    if span is None:
        return body
    items = _items(span.group(1))
    kept = [line for item in items if not _NAMES_ABI.search(" ".join(item)) for line in item]
    if len(kept) == sum(map(len, items)):
        return body
    text = "\n".join([first, *(line for line in kept if line.strip())])
    return body[:span.start(1)] + text + "\n\n" + body[span.end(1):].lstrip("\n")


def own_contract(body: str, problem: str, abi: str | None = None) -> str:
    """`body` with its Keep unchanged section stated for the session's problem: the items that name a kernel
    contract (written for the text's own problem) give way to the session's `abi`, or, where the ABI is stated
    elsewhere (a brief's header), one line pointing at it."""
    if abi is None:
        return _replace_contract(body, f"- The kernel contract (ABI) stated above for {problem}: its arguments, "
                                       "their order and types, and the entry name; one `peak:` launch line in step "
                                       "with the launch.")
    stated = "\n".join(f"  {line}" if line.strip() else "" for line in abi.strip().splitlines())
    return _replace_contract(body, f"- This session's kernel contract (ABI) for {problem}, not the text's example's: "
                                   "its arguments, their order and types, and the entry name; one `peak:` launch "
                                   f"line in step with the launch:\n{stated}")


def written_for(text: Transformation, problems: Iterable[Problem]) -> tuple[bool, str | None]:
    """Whether the text's Keep unchanged items cite a problem's arguments (two or more names of one of the problems
    the text is for; "Signature and entry name" cites none and holds in any session), and whose they are: the
    problem they cite most completely, half its names at least; None when none stands out (two problems with the
    same arguments)."""
    words = {w for item in contract_items(text.body) for w in _WORD.findall(item)}
    if not words:
        return False, None
    cites, scored = False, []
    for problem in problems:
        if not text.for_problem(problem.name, problem.traits):
            continue
        names = {a.name for dtype in problem.dtypes[:1] for a in problem.arguments(dtype)}
        cited = names & words
        cites = cites or len(cited) >= 2
        if len(cited) >= 2 and 2 * len(cited) >= len(names):
            scored.append((len(cited) / len(names), len(cited), problem.name))
    scored.sort(reverse=True)
    if not scored or (len(scored) > 1 and scored[0][:2] == scored[1][:2]):
        return cites, None
    return cites, scored[0][2]


def contract_note(body: str, problem: str | None) -> str:
    """`body` read without a session: its contract items kept, introduced by whose they are (`problem`, the text's
    example's) and that a session's own contract governs."""
    if not contract_items(body):
        return body
    whose = f"{problem}'s, the problem this text's example is written for" if problem else \
        "the text's example problem's"
    note = (f"- The items here that name a kernel contract (signature, bindings, push constants) are {whose}. In "
            "a session, keep that session's own contract instead (start_session's ABI; get_transformation with "
            "session_id states it here).")
    span = _SECTION.search(body)
    assert span is not None  # contract_items found the section
    return body[:span.start(1)] + note + "\n" + body[span.start(1):]
