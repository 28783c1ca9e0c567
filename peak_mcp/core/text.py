"""Free text from an agent that is stored and shown again: bounded and visible at input, escaped at output.

A session's label comes back in every list_sessions page and in `peak-mcp sessions` on the operator's terminal, so
it is one short line of visible text. Data dirs written before that was checked may still hold anything, so the CLI
also escapes what it prints from them.
"""

from __future__ import annotations

import unicodedata

from peak_mcp.core.errors import InvalidInput

LABEL_MAX_CHARS = 100
# What a terminal or a one-line listing acts on instead of showing: Cc (C0/C1 controls: ESC, BEL, CSI, newline),
# Cf (format characters, among them the bidi overrides that reorder a line), Zl/Zp (line and paragraph separators)
# and Cs (lone surrogates, which no UTF-8 output can encode).
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _hidden(char: str) -> bool:
    return unicodedata.category(char) in HIDDEN_CATEGORIES


def checked_label(label: str | None) -> str | None:
    """The label as given, or InvalidInput naming the limit or the first character refused."""
    if label is None:
        return None
    if not isinstance(label, str):
        raise InvalidInput(f"label={label!r} is not text", "give the session a short name, or omit label.")
    if len(label) > LABEL_MAX_CHARS:
        raise InvalidInput(f"the label is {len(label)} characters, over the {LABEL_MAX_CHARS}-character limit",
                           f"give the session a name of at most {LABEL_MAX_CHARS} characters.")
    bad = next((i for i, char in enumerate(label) if _hidden(char)), None)
    if bad is not None:
        raise InvalidInput(f"the label has a control character ({printable(label[bad])} at position {bad}); a label "
                           "is one line of visible text", "drop control characters, newlines and tabs from it.")
    return label


def clipped(text: str, limit: int = LABEL_MAX_CHARS) -> str:
    """At most `limit` characters, the cut marked: for labels stored before they were bounded."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def printable(text: str, keep: str = "") -> str:
    """`text` with each control or format character written as its escape (`\\x1b`, `\\u202e`), except those in
    `keep` (e.g. newlines in a multi-line report)."""
    return "".join(c if c in keep or not _hidden(c) else ascii(c)[1:-1] for c in text)
