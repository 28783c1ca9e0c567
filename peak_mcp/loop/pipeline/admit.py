"""Admission, the pipeline's first phase: a kernel source the server will store and evaluate, or InvalidInput
saying what is wrong with it (empty, not UTF-8 text, too large). Nothing is recorded for a source refused here."""

from __future__ import annotations

from peak_mcp.core.errors import InvalidInput

MAX_SOURCE_BYTES = 256 * 1024


def admit(source: str) -> None:
    """InvalidInput unless `source` is a non-empty text of at most MAX_SOURCE_BYTES in UTF-8."""
    if not isinstance(source, str) or not source.strip():
        raise InvalidInput("the kernel source is empty", "pass the whole kernel file, annotation line included.")
    try:
        size = len(source.encode())
    except UnicodeEncodeError as exc:  # a lone surrogate from JSON's \ud800: no UTF-8 text, nothing to store
        line = source.count("\n", 0, exc.start) + 1
        raise InvalidInput(f"line {line} of the kernel source holds U+{ord(source[exc.start]):04X}, a lone "
                           "surrogate: not valid Unicode text", "send the kernel as plain UTF-8 text.") from None
    if size > MAX_SOURCE_BYTES:
        raise InvalidInput(f"the kernel source is {size} bytes, over the {MAX_SOURCE_BYTES} "
                           "limit", "submit one kernel file, without generated tables.")
