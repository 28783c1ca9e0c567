"""Each configuration a tune tried that failed, in a phrase: which configuration and what went wrong (compile error,
wrong result with its error, a fault, a timeout). An agent was told "2 failed their checks" and could find neither
which two nor why in the answer, history or get_version."""

from __future__ import annotations

import re
from collections.abc import Iterable

from peak_mcp.evaluation.configs import Config, ConfigResult

PHRASE_CHARS = 220  # one failure's cause, clipped: the full reason stays in the record's results
KEPT = 64  # phrases a report keeps (a search may try 4096); the rest are counted
# A validation verdict's check -> words; any other check is a fault of the kernel (out of bounds, unwritten, ...).
CHECK_WORDS = {"wrong_result": "wrong result", "timeout": "timeout", "not_finite": "wrong result (NaN or inf)"}
KIND_WORDS = {"compile": "compile error", "resources": "over a device limit", "geometry": "launch refused",
              "recheck": "timing recheck failed", "error": "fault (the worker failed on it)"}
_BOUND = re.compile(r"^(.*?elements over their bound)", re.DOTALL)  # a wrong result up to its formula's words
_ERROR_LINE = re.compile(r"^.*\berror\b.*$", re.IGNORECASE | re.MULTILINE)


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= PHRASE_CHARS else text[:PHRASE_CHARS].rsplit(" ", 1)[0] + " [...]"


def cause(result: ConfigResult) -> str:
    """What one failed or build-pruned configuration came to, briefly."""
    reason = (result.reason or "").strip()
    if result.kind == "validation":
        check, _, message = reason.partition(": ")
        words = CHECK_WORDS.get(check, f"fault ({check})" if check else "failed its checks")
        bound = _BOUND.match(message)
        return f"{words}: {_clip(bound.group(1) if bound else message)}" if message else words
    if result.kind == "compile":
        line = _ERROR_LINE.search(reason)
        return f"compile error: {_clip(line.group(0) if line else reason)}"
    if result.kind == "error" and re.search(r"time ?out|timed out|time limit", reason, re.IGNORECASE):
        return f"timeout: {_clip(reason)}"
    words = KIND_WORDS.get(result.kind or "error", "failed")
    return f"{words}: {_clip(reason)}" if reason else words


def failures(results: Iterable[ConfigResult]) -> list[str]:
    """A phrase per configuration that was tried and failed: failed its checks, or pruned by its build or launch
    (not by `where`, which rules configurations out before anything is tried and is counted apart)."""
    failed = [r for r in results if r.status == "failed" or (r.status == "pruned" and r.kind != "where")]
    phrases = [f"{Config(params=r.params).label()}: {cause(r)}" for r in failed[:KEPT]]
    return phrases + ([f"{len(failed) - KEPT} more (their reasons are in the record's results)"]
                      if len(failed) > KEPT else [])
