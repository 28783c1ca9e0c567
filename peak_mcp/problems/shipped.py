"""The problems that ship with the server, by name: the built-in classes (matmul) and the shipped problem files.

`get_problem` answers from a registry of what ships with the server; a server answers from its own
(`PeakService.problems`), which adds the operator's folders. In a worker, `worker_problem` rebuilds the problem a job
names from the job alone.
"""

from __future__ import annotations

import functools

from peak_mcp.core.errors import PeakError
from peak_mcp.problems.base import Problem
from peak_mcp.problems.declaration import ProblemDeclaration
from peak_mcp.problems.declared import DeclaredProblem
from peak_mcp.problems.matmul import Matmul
from peak_mcp.problems.registry import ProblemRegistry

BUILTIN_CLASSES: dict[str, Problem] = {p.name: p for p in (Matmul(),)}


@functools.cache
def shipped_registry() -> ProblemRegistry:
    """The built-in classes and the shipped problem files (read once per process)."""
    return ProblemRegistry(classes=BUILTIN_CLASSES.values())


def get_problem(name: str) -> Problem:
    """A problem that ships with the server (NotFound with the known names otherwise)."""
    if name in BUILTIN_CLASSES:
        return BUILTIN_CLASSES[name]
    return shipped_registry().get(name)


_declared: dict[tuple[str, str], DeclaredProblem] = {}  # a worker's problems, by (path, sha256)


def worker_problem(name: str, declaration: ProblemDeclaration | None) -> Problem:
    """The problem a job names, in a worker: a built-in class by name, or one built from the job's declaration
    (its file is imported when its code is first needed, once its sha256 matches)."""
    if declaration is not None:
        if declaration.name != name:
            raise PeakError(f"malformed job: problem {name!r} with the declaration of {declaration.name!r}")
        key = (declaration.path, declaration.sha256)
        if key not in _declared:
            _declared[key] = DeclaredProblem(declaration)
        return _declared[key]
    if name in BUILTIN_CLASSES:
        return BUILTIN_CLASSES[name]
    raise PeakError(f"malformed job: problem {name!r} comes without its declaration",
                    "the server sends a problem file's declaration with every job.")
