"""Problem registry."""

from __future__ import annotations

from peak_mcp.errors import NotFound
from peak_mcp.problems.base import BufferArg, Problem, ScalarArg, Tolerance
from peak_mcp.problems.matmul import Matmul

PROBLEMS: dict[str, Problem] = {p.name: p for p in (Matmul(),)}


def get_problem(name: str) -> Problem:
    try:
        return PROBLEMS[name]
    except KeyError:
        raise NotFound(f"unknown problem {name!r}", f"call list_problems; known: {sorted(PROBLEMS)}.") from None


__all__ = ["PROBLEMS", "BufferArg", "Problem", "ScalarArg", "Tolerance", "get_problem"]
