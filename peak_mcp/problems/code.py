"""Where a problem file's Python runs: `ProblemCode`, the calls a `DeclaredProblem` makes into the file.

`LocalCode` imports the file in this process and calls its functions. Only processes made for it do that: the
describe subprocess, a problem host (peak_mcp.runner.problem_host: one confined process per untrusted file and
device), and a device worker for the problem files that ship with the server (trusted, like matmul's class). A device
worker serves every session, so it reaches an operator's or a client's file through a link to that file's problem
host (peak_mcp.runner.problem_link.RemoteCode), which has the same interface and moves arrays, never code.
"""

from __future__ import annotations

import inspect
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from peak_mcp.core.errors import PeakError
from peak_mcp.core.text_safety import clean

if TYPE_CHECKING:
    from peak_mcp.problems.declaration import ProblemDeclaration

SHIPPED_DIR = Path(__file__).resolve().parent / "builtin"
FUNCTIONS = ("reference", "generate", "error_scale", "torch_reference")


def is_shipped(declaration: ProblemDeclaration) -> bool:
    """A problem file that ships with the server (peak_mcp/problems/builtin): trusted code, run in the worker."""
    return Path(declaration.path).parent == SHIPPED_DIR


def fix_hint(path: str) -> str:
    """What to do about a problem file's own failure: whoever owns the file fixes it."""
    return (f"fix the problem file {path} (a file saved by define_problem: call define_problem again with the fixed "
            "source); the kernel is not at fault.")


class ProblemCode(Protocol):
    """The calls into a problem file's functions. Arrays in and out are numpy's, or `xp`'s where a call passes the
    `xp` keyword (the file's function then computes with it)."""

    def call(self, function: str, *args: Any, **kwargs: Any) -> Any:
        """The function's result (raw: an array, a tuple, a dict, a number); ProblemCodeError when it raises."""

    def generate(self, name: str, shape: tuple[int, ...], seed: list[int]) -> Any:
        """generate(name, shape, numpy.random.default_rng(seed))."""

    def parameters(self, function: str) -> tuple[frozenset[str], bool] | None:
        """The function's parameter names, and whether it takes **keywords; None where it has no signature."""


class LocalCode:
    """The file imported in this process (refused outside a process that may run problem code)."""

    def __init__(self, declaration: ProblemDeclaration) -> None:
        self.declaration = declaration

    def module(self) -> Any:
        from peak_mcp.problems.loading import load_module

        return load_module(self.declaration)

    def call(self, function: str, *args: Any, **kwargs: Any) -> Any:
        from peak_mcp.problems.loading import ProblemCodeError

        fn = getattr(self.module(), function)
        try:
            return fn(*args, **kwargs)
        except PeakError:
            raise
        except Exception as exc:
            path = self.declaration.path
            frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == path]
            line = frames[-1].lineno if frames else None
            where = f"{path}:{line}" if line else path
            raise ProblemCodeError(
                f"the problem's own code failed, not the kernel: {function}() in {where} raised "
                f"{type(exc).__name__}: {clean(str(exc), 300)}", fix_hint(path), line) from None

    def generate(self, name: str, shape: tuple[int, ...], seed: list[int]) -> Any:
        return self.call("generate", name, shape, np.random.default_rng(seed))

    def parameters(self, function: str) -> tuple[frozenset[str], bool] | None:
        try:
            params = inspect.signature(getattr(self.module(), function)).parameters
        except (TypeError, ValueError):
            return None
        return frozenset(params), any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())

    def torch_reference(self) -> Any:
        return getattr(self.module(), "torch_reference", None)
