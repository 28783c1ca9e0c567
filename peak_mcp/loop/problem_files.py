"""The problems a server offers: listed with their ABI per backend, and defined by a client (a problem file's text,
read by the confined describe before anything is saved)."""

from __future__ import annotations

import ast
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from peak_mcp.backends.registry import BACKENDS
from peak_mcp.core.config import Settings
from peak_mcp.core.errors import InvalidInput
from peak_mcp.core.launch import EXPRESSIONS
from peak_mcp.loop.models import ProblemInfo, ProblemList
from peak_mcp.problems.base import Problem
from peak_mcp.problems.declaration import NAME as NAME_PATTERN
from peak_mcp.problems.describe import MISSING_MODULE
from peak_mcp.problems.registry import DescribeFailed, ProblemRegistry, describe_in_subprocess

MAX_DEFINE_BYTES = 256 * 1024  # define_problem's source
REFERENCE_KERNEL_NEEDED = ("none in Python: start_session needs reference_kernel=SOURCE (your current kernel, v0); "
                           "every candidate is checked against it on the same inputs")


def problem_info(p: Problem, detail: bool = True) -> ProblemInfo:
    """A problem as list_problems shows it: symbols, dtypes, traits; with `detail`, also its ABI per backend and
    dtype and its definition (what list_problems(problem=...) and define_problem answer)."""
    backends = [b for b in p.backends if b in BACKENDS]
    dtypes = {b: list(p.dtypes_for(b)) for b in backends}
    return ProblemInfo(
        name=p.name, title=p.title, sizes=list(p.symbols), default_sizes=p.default_sizes, dtypes=list(p.dtypes),
        backends=backends, source=p.source, dtypes_by_backend=dtypes,
        abi={b: p.abi(b, dtypes[b][0]) for b in backends} if detail else {},
        abi_by_dtype={b: {d: p.abi(b, d) for d in dtypes[b][1:]} for b in backends if dtypes[b][1:]} if detail
        else {},
        naive=None if all(p.has_naive(b, dtypes[b][0]) for b in backends) else
        [b for b in backends if p.has_naive(b, dtypes[b][0])],
        reference=REFERENCE_KERNEL_NEEDED if p.needs_reference_kernel else None,
        definition=(p.definition or None) if detail else None, annotation=EXPRESSIONS if detail else None,
        traits=list(p.traits), traits_guessed=_guessed(p),
        traits_probed=_guessed(p) and bool(getattr(getattr(p, "declaration", None), "probed_traits", ())))


def _guessed(p: Problem) -> bool:
    """Its traits come from its buffer shapes alone: a problem file (not KernelBench's, whose traits are the
    operations its forward runs) that declares no TRAITS. An output shaped like its input reads as elementwise,
    which a LayerNorm is not."""
    declaration = getattr(p, "declaration", None)
    return declaration is not None and not declaration.traits


def defined_problem_stem(source: str, name: str | None) -> str:
    """The file stem define_problem stages a source under, read without running it: its NAME (a string literal at
    top level), else for a KernelBench module (class Model, def get_inputs) `name`. InvalidInput naming the line
    for a syntax error, and for a source over MAX_DEFINE_BYTES."""
    if not isinstance(source, str) or not source.strip():
        raise InvalidInput("the problem source is empty", "pass a problem file's whole text.")
    if len(source.encode("utf-8", "replace")) > MAX_DEFINE_BYTES:
        raise InvalidInput(f"the problem source is over {MAX_DEFINE_BYTES} bytes",
                           "inline only the naive kernels it needs.")
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise InvalidInput(f"the problem was not saved: line {exc.lineno}: syntax error: {exc.msg}",
                           "fix the source and call define_problem again.") from None
    declared = None
    top = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "NAME" for t in node.targets):
            declared = node.value.value if isinstance(node.value, ast.Constant) else None
            if not isinstance(declared, str):
                raise InvalidInput(f"the problem was not saved: line {node.lineno}: NAME must be a string literal",
                                   "write NAME = \"my_problem\".")
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            top.add(node.name)
    chosen = declared or (name if {"Model", "get_inputs"} <= top else None)
    if chosen is None:
        raise InvalidInput("the problem was not saved: it declares no NAME, and a KernelBench module (class Model, "
                           "get_inputs) needs the name argument", "set NAME, or pass name.")
    if name is not None and declared is not None and name != declared:
        raise InvalidInput(f"name={name!r} differs from the source's NAME {declared!r}", "omit name.")
    if not NAME_PATTERN.fullmatch(chosen):
        raise InvalidInput(f"problem name {chosen!r} must match {NAME_PATTERN.pattern}", None)
    return chosen


class ProblemFiles:
    def __init__(self, settings: Settings, problems: ProblemRegistry, allowed: Callable[[], bool]) -> None:
        self.settings, self.problems, self.defining_allowed = settings, problems, allowed

    def list_problems(self, problem: str | None = None) -> ProblemList:
        """Every problem in brief (the ABIs grow with each problem: 25K for the 7 shipped ones); with `problem`,
        that one in full: its ABI for every backend and dtype, and its definition."""
        self.problems.refresh()
        if problem is not None:
            return ProblemList(problems=[problem_info(self.problems.get(problem))], errors=[])
        return ProblemList(problems=[problem_info(p, detail=False) for p in self.problems.problems()],
                           errors=[e.model_dump() for e in self.problems.client_errors()])

    def define_problem(self, source: str, name: str | None = None) -> ProblemInfo:
        """Save a problem file's text (docs/problems.md, or a KernelBench module, named by `name`) under
        `<data dir>/problems/<NAME>.py` once the confined describe has read it; nothing is saved otherwise. Over
        HTTP only where the operator allows it (PEAK_MCP_ALLOW_DEFINE_PROBLEM)."""
        if not self.defining_allowed():
            raise InvalidInput("define_problem is off on this HTTP server",
                               "the operator turns it on with PEAK_MCP_ALLOW_DEFINE_PROBLEM=true; or put the problem "
                               "file in a folder the server reads (PEAK_MCP_PROBLEMS).")
        stem = defined_problem_stem(source, name)
        self._check_name_free(stem)
        with tempfile.TemporaryDirectory(prefix="peak-define-") as staging:
            staged = Path(staging) / f"{stem}.py"
            staged.write_text(source)
            try:
                declaration = describe_in_subprocess(staged, sandbox=self.problems.sandbox,
                                                     timeout_s=self.problems.timeout_s,
                                                     memory_bytes=self.problems.memory_bytes)
            except DescribeFailed as exc:
                where = f"line {exc.line}: " if exc.line else ""
                raise InvalidInput(f"the problem was not saved: {where}{exc.message}",
                                   "ask the operator to install it, or define the problem with a NumPy reference "
                                   "(docs/problems.md)." if MISSING_MODULE in exc.message else
                                   "fix the source and call define_problem again.") from None
        self._check_name_free(declaration.name)
        folder = self.settings.defined_problems
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{declaration.name}.py"
        temporary = folder / f".{declaration.name}.{os.getpid()}.tmp"
        temporary.write_text(source)
        temporary.replace(target)  # a file of the same name is replaced whole, never half written
        self.problems.remember(target, declaration)  # read once: the refresh takes it as read, not a second time
        self.problems.refresh()
        return problem_info(self.problems.get(declaration.name))

    def _check_name_free(self, name: str) -> None:
        """InvalidInput where `name` is a shipped problem's or a built-in one's: a defined file never replaces it."""
        holder = self.problems.reserved().get(name)
        if holder is not None:
            raise InvalidInput(f"the problem was not saved: the name {name!r} is taken by {holder}, which a defined "
                               "problem cannot replace",
                               f"choose a different NAME (e.g. NAME = \"my_{name}\"; for a KernelBench module, a "
                               "different name argument) and call define_problem again.")
