"""Running a problem file's Python: where it may happen (a process that says it is a worker, describe or a launch
target; never the server) and importing a file from the exact bytes the server read. Also the error that blames the
file, not the kernel."""

from __future__ import annotations

import contextlib
import hashlib
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from peak_mcp.core.errors import PeakError

if TYPE_CHECKING:
    from peak_mcp.problems.declaration import ProblemDeclaration


# --- who may run problem code --------------------------------------------------------------------------------
_allowed = threading.local()
_process_allowed = False


def allow_problem_code() -> None:
    """Called once at the start of a process that may import problem files: a device worker, the describe
    subprocess, a sanitizer's launch target. The server never calls it."""
    global _process_allowed
    _process_allowed = True


@contextlib.contextmanager
def problem_code_allowed() -> Iterator[None]:
    """Problem code allowed on this thread for a while: for tests and maintainer tools that play the worker."""
    before = getattr(_allowed, "on", False)
    _allowed.on = True
    try:
        yield
    finally:
        _allowed.on = before


def may_run_problem_code() -> bool:
    return _process_allowed or getattr(_allowed, "on", False)


class ProblemCodeError(PeakError):
    """The problem's own code failed or broke its declaration: the problem file is at fault, not the kernel."""

    kind = "problem_error"

    def __init__(self, message: str, hint: str | None = None, line: int | None = None) -> None:
        super().__init__(message, hint)
        self.line = line  # in the problem file


# --- loading a problem file in a worker ------------------------------------------------------------------------
_modules: dict[tuple[str, str], types.ModuleType] = {}
_loading = threading.Lock()


def load_module(declaration: ProblemDeclaration) -> types.ModuleType:
    """The problem file's module, executed from the bytes whose sha256 the declaration names; refused outside a
    process that may run problem code."""
    if not may_run_problem_code():
        raise PeakError(f"refusing to import the problem file {declaration.path} in this process: problem code "
                        "runs only in worker processes", "this is a bug in peak-mcp; please report it.")
    key = (declaration.path, declaration.sha256)
    with _loading:
        if key in _modules:
            return _modules[key]
        module = problem_module(execute_file(Path(declaration.path), declaration.sha256), declaration.name)
        _modules[key] = module
        return module


def problem_module(module: types.ModuleType, name: str) -> types.ModuleType:
    """A problem file's module as the declaration reads it: itself, or for a KernelBench file (class Model,
    get_inputs) a module holding its translation (peak_mcp.problems.kernelbench: the upper-case names, reference,
    generate, torch_reference) under the problem's `name`."""
    from peak_mcp.problems.kernelbench import translate as kernelbench

    if not kernelbench.looks_like_kernelbench(vars(module)):
        return module
    translated = kernelbench.declare_kernelbench(module, name)
    wrapper = types.ModuleType(module.__name__ + "_kernelbench", module.__doc__)
    wrapper.__file__ = module.__file__
    vars(wrapper).update(translated.namespace())
    wrapper.KERNELBENCH = translated  # type: ignore[attr-defined]  # symbols, constants, notes
    return wrapper


def execute_file(path: Path, sha256: str | None = None) -> types.ModuleType:
    """Run a problem file as a module (not registered in sys.modules under its own name, so two files never share
    one). `sha256`: the file must still hold exactly those bytes."""
    if not may_run_problem_code():
        raise PeakError(f"refusing to run the problem file {path} in this process", None)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ProblemCodeError(f"cannot read the problem file {path}: {exc.strerror}",
                               "the worker reads problem files where the server found them.") from None
    digest = hashlib.sha256(data).hexdigest()
    if sha256 is not None and digest != sha256:
        raise ProblemCodeError(f"the problem file {path} changed since the server read it",
                               "call list_problems (the server reads it again) and start a new session.")
    module = types.ModuleType(f"peak_problem_{digest[:16]}")
    module.__file__ = str(path)
    code = compile(data, str(path), "exec", dont_inherit=True)
    sys.modules[module.__name__] = module  # dataclasses and pickling look their module up there
    try:
        exec(code, module.__dict__)
    except BaseException:
        sys.modules.pop(module.__name__, None)
        raise
    return module
