"""Read a problem file's declaration in a process of its own: `python -m peak_mcp.problems.describe FILE`.

The server runs this confined (Landlock: the system and Python trees and the file's own folder read-only, a scratch
folder writable), under memory and CPU limits and a timeout (`peak_mcp.problems.registry`). It imports the file,
turns its upper-case names into a `ProblemDeclaration`, and tries the file's code once at small sizes (inputs,
reference, error scale: each output the declared shape, finite), so that a broken file is reported when it is
found, not in the middle of a session. It writes one JSON object to its standard output,
`{"declaration": {...}}` or `{"error": "...", "line": N}`; what the problem file prints goes to standard error.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import os
import sys
import textwrap
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from peak_mcp.core.dtypes import EXACT_DTYPES
from peak_mcp.core.errors import PeakError
from peak_mcp.problems.base import SAMPLED_WORK
from peak_mcp.problems.declaration import MAX_DEFINITION_CHARS
from peak_mcp.problems.trait_probe import probe_traits

NAIVE_SUFFIXES = (".cu", ".hip", ".hlsl", ".txt")
KEYS = ("NAME", "TITLE", "SIZES", "DTYPES", "INPUTS", "OUTPUTS", "SCALARS", "FLOPS", "BYTES", "CONSTRAINTS",
        "RANGE", "STRESS_RANGE", "TOLERANCE", "NAIVE", "BATCH", "REDUCTION", "SAMPLES",
        "TENSOR_CORES", "TRAITS", "REFERENCE_IN_FLOAT64")
MISSING_MODULE = "the server's Python has no module"
FUNCTIONS = ("reference", "generate", "error_scale", "torch_reference")
SMOKE_SIZES = (5, 8, 16, 64, 3, 2, 1, 128)
DISTINCT_SIZES = (5, 7, 3, 11, 2, 13, 17, 19, 23, 29, 31, 37)  # one per symbol (at most 12)


class DescribeError(Exception):
    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message, self.line = message, line


def top_level_lines(source: str) -> dict[str, int]:
    """Line of each top-level name a problem file assigns or defines."""
    lines: dict[str, int] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    lines.setdefault(target.id, node.lineno)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines.setdefault(node.name, node.lineno)
    return lines


def describe_file(path: Path) -> dict[str, Any]:
    """The declaration of the problem file at `path`, as JSON data; DescribeError naming the line otherwise."""
    from peak_mcp.problems import loading
    from peak_mcp.problems.declaration import ProblemDeclaration
    from peak_mcp.problems.declared import DeclaredProblem
    from peak_mcp.problems.kernelbench import translate as kernelbench
    from peak_mcp.problems.loading import execute_file, problem_module

    data = path.read_bytes()
    sha256 = hashlib.sha256(data).hexdigest()
    try:
        text = data.decode("utf-8")
        lines = top_level_lines(text)
    except UnicodeDecodeError as exc:
        raise DescribeError(f"the file is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except SyntaxError as exc:
        raise DescribeError(f"syntax error: {exc.msg}", exc.lineno) from None
    try:
        module = execute_file(path, sha256)
    except SyntaxError as exc:
        raise DescribeError(f"syntax error: {exc.msg}", exc.lineno) from None
    except BaseException as exc:  # SystemExit and KeyboardInterrupt from a problem file too
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(path)]
        line = frames[-1].lineno if frames else None
        if isinstance(exc, ModuleNotFoundError) and exc.name and frames:  # the file's own import: the environment
            extra = " (pip install 'peak-mcp[torch]' where the server runs)" if exc.name == "torch" else ""
            raise DescribeError(f"{MISSING_MODULE} {exc.name!r}, which the file imports{extra}: the file may be "
                                "right; this server cannot run it", line) from None
        raise DescribeError(f"importing it raised {type(exc).__name__}: {str(exc)[:300]}", line) from None
    if kernelbench.looks_like_kernelbench(vars(module)):  # class Model, get_inputs: translated, not declared
        try:
            module = problem_module(module, kernelbench.kernelbench_name(path.stem))
        except kernelbench.KernelBenchError as exc:
            raise DescribeError(f"a KernelBench file that cannot be translated: {exc.message}"
                                + (f" ({exc.hint})" if exc.hint else "")) from None
        except Exception as exc:
            frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(path)]
            raise DescribeError(f"probing its Model raised {type(exc).__name__}: {str(exc)[:300]}",
                                frames[-1].lineno if frames else None) from None
    names = vars(module)

    def fail(key: str, why: str) -> DescribeError:
        return DescribeError(f"{key}: {why}", lines.get(key))

    if "NAME" not in names:
        raise DescribeError("declares no NAME (a problem file sets NAME, SIZES, INPUTS, OUTPUTS and defines "
                            "reference; see docs/problems.md), nor is it a KernelBench file (class Model, "
                            "get_inputs)")
    if "reference" in names and not callable(names["reference"]):
        raise fail("reference", "is not a function (float64 inputs -> the outputs)")
    doc = (module.__doc__ or "").strip()
    sizes = names.get("SIZES")
    if not isinstance(sizes, Mapping) or not (sizes or names.get("DEFINITION")):  # {}: a fixed KernelBench file
        raise fail("SIZES", "a dict of size symbols and their default values, e.g. {'ROWS': 8192, 'COLS': 8192}")
    declaration = {
        "name": names["NAME"], "title": names.get("TITLE") or (doc.splitlines()[0] if doc else names["NAME"]),
        "doc": doc[:2000], "definition": _definition(names), "sizes": dict(sizes),
        "dtypes": _names_tuple(names.get("DTYPES", ("f32",)), "DTYPES", fail),
        "inputs": _buffers(names.get("INPUTS", {}), "INPUTS", fail),
        "outputs": _buffers(names.get("OUTPUTS"), "OUTPUTS", fail),
        "scalars": _scalars(names.get("SCALARS", tuple(sizes)), fail),
        "flops": _expr(names.get("FLOPS", 0), "FLOPS", fail) or "0",
        "bytes": _expr(names.get("BYTES"), "BYTES", fail),
        "constraints": _names_tuple(names.get("CONSTRAINTS", ()), "CONSTRAINTS", fail),
        "ranges": _ranges(names.get("RANGE", {}), fail),
        "stress_ranges": _ranges(names.get("STRESS_RANGE", {}), fail, "STRESS_RANGE"),
        "tolerance": _tolerance(names.get("TOLERANCE"), fail),
        "naive": _naive(names.get("NAIVE", {}), path.parent, fail),
        "batch": _batch(names.get("BATCH"), fail),
        "reduction": _expr(names.get("REDUCTION"), "REDUCTION", fail),
        "samples": _samples(names.get("SAMPLES", {}), fail),
        "tensor_cores": names.get("TENSOR_CORES") is True,
        "traits": _names_tuple(names.get("TRAITS", ()), "TRAITS", fail),
        "has_generate": callable(names.get("generate")),
        "has_error_scale": callable(names.get("error_scale")),
        "has_torch_reference": callable(names.get("torch_reference")),
        "has_reference": callable(names.get("reference")),
        "reference_takes_xp": callable(names.get("reference")) and _takes_xp(names["reference"]),
        "reference_in_float64": names.get("REFERENCE_IN_FLOAT64") is True,
        "path": str(path), "sha256": sha256,
        "lines": {k: v for k, v in lines.items() if k in KEYS or k in FUNCTIONS},
    }
    try:
        checked = ProblemDeclaration.model_validate(declaration)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        message = str(first.get("msg", "")).removeprefix("Value error, ")
        key = message.split(":", 1)[0] if message.split(":", 1)[0] in KEYS else \
            _key_of(first.get("loc", ()))
        where = f"{key}: " if key and not message.startswith(key) else ""
        raise DescribeError(f"{where}{message}", lines.get(key or "")) from None
    loading._modules[(str(path), sha256)] = module  # the smoke test uses this import, not a second one
    ran = _smoke_test(DeclaredProblem(checked))
    if ran is not None and not checked.traits:  # the shapes alone cannot tell a LayerNorm from an activation
        checked = checked.model_copy(update={"probed_traits": probe_traits(DeclaredProblem(checked), *ran)})
    return checked.model_dump(mode="json")


def _smoke_test(problem: Any) -> tuple[dict[str, int], dict[str, Any], dict[str, Any], float] | None:
    """Inputs and the reference at one small size set: every output the declared shape, finite. Returns (sizes,
    inputs, outputs, the reference's seconds) for trait_probe; None where nothing ran."""
    # Distinct values first: at equal sizes a transposed or swapped-axis result has the declared shape too.
    distinct = {symbol: problem.sampled[symbol][0] if problem.sampled.get(symbol) else value
                for symbol, value in zip(problem.symbols, DISTINCT_SIZES, strict=False)}
    candidates = [distinct,
                  *(dict.fromkeys(problem.symbols, v) for v in SMOKE_SIZES)]
    candidates += problem.generality_sizes(problem.default_sizes)
    for sizes in candidates:
        try:
            problem.check_sizes(sizes)
            if problem.symbols and sizes != distinct and problem.work(sizes) > SAMPLED_WORK:
                continue  # 128 in every symbol of a 4-D attention is 1e11 flops: 100 s in numpy
        except PeakError:
            continue
        break
    else:
        return None  # no small size meets the constraints: the first session's validation tries the code
    import numpy as np

    try:
        inputs = problem.make_inputs(sizes, problem.dtypes[0], 0, np)
        if not problem.declaration.has_reference:  # the session's reference kernel is, checked when it runs
            return None
        started = time.perf_counter()
        outputs = problem.reference(inputs, sizes, problem.dtypes[0], 0, float("inf"), np)
    except PeakError as exc:
        raise DescribeError(f"at sizes {sizes}: {exc.message}", getattr(exc, "line", None)) from None
    return dict(sizes), inputs, outputs, time.perf_counter() - started


def _definition(names: Mapping[str, Any]) -> str:
    """What the problem computes, in the file's own words: a KernelBench file's (its translation says), else the
    reference function's source; empty where neither is there."""
    given = names.get("DEFINITION")
    if isinstance(given, str):
        return given[:MAX_DEFINITION_CHARS]
    reference = names.get("reference")
    try:
        source = textwrap.dedent(inspect.getsource(reference)).rstrip() if callable(reference) else ""
    except (OSError, TypeError):
        return ""
    return f"reference, the file's own source:\n{source}"[:MAX_DEFINITION_CHARS] if source else ""


def _key_of(loc: tuple[Any, ...]) -> str | None:
    field = str(loc[0]) if loc else ""
    return {"name": "NAME", "title": "TITLE", "sizes": "SIZES", "dtypes": "DTYPES", "inputs": "INPUTS",
            "outputs": "OUTPUTS", "scalars": "SCALARS", "flops": "FLOPS", "bytes": "BYTES",
            "constraints": "CONSTRAINTS", "ranges": "RANGE", "stress_ranges": "STRESS_RANGE",
            "tolerance": "TOLERANCE", "naive": "NAIVE",
            "batch": "BATCH", "reduction": "REDUCTION", "samples": "SAMPLES", "traits": "TRAITS"}.get(field)


def _batch(value: Any, fail: Any) -> str | list[str] | None:
    """BATCH: one size symbol, or a tuple of them (the leading axes)."""
    if value is None or isinstance(value, str):
        return value
    return _names_tuple(value, "BATCH", fail)


def _takes_xp(function: Any) -> bool:
    try:
        return "xp" in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


def _names_tuple(value: Any, key: str, fail: Any) -> list[str]:
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, tuple | list) or not all(isinstance(v, str) for v in value):
        raise fail(key, "a tuple of strings")
    return list(value)


def _expr(value: Any, key: str, fail: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise fail(key, f"an integer or an expression over the size symbols (a string), not {type(value).__name__}")
    return str(value)


def _buffers(value: Any, key: str, fail: Any) -> list[dict[str, Any]]:
    if not isinstance(value, Mapping):
        raise fail(key, "a dict: name -> shape (a tuple of expressions), or name -> (dtype, shape)")
    buffers = []
    for name, spec in value.items():
        dtype, int_range = None, None
        if isinstance(spec, tuple | list) and len(spec) == 3 and isinstance(spec[0], str) and \
                isinstance(spec[1], tuple | list):  # (dtype, shape, (low, high)): an integer input's draw
            dtype, spec, bounds = spec
            if not isinstance(bounds, tuple | list) or len(bounds) != 2:
                raise fail(key, f"{name}: (dtype, shape, (low, high)): the range is two expressions")
            int_range = [_expr(b, key, fail) for b in bounds]
        elif isinstance(spec, tuple | list) and len(spec) == 2 and isinstance(spec[0], str) and \
                spec[0] in ("f32", "f16", "bf16", *EXACT_DTYPES) and isinstance(spec[1], tuple | list):
            dtype, spec = spec
        if isinstance(spec, str | int):
            spec = (spec,)
        if not isinstance(spec, tuple | list) or not all(isinstance(e, str | int) and not isinstance(e, bool)
                                                          for e in spec):
            raise fail(key, f"{name}: a shape is a tuple of expressions, e.g. ('ROWS', 'COLS')")
        buffers.append({"name": str(name), "shape": [str(e) for e in spec], "dtype": dtype,
                        **({"int_range": int_range} if int_range is not None else {})})
    return buffers


def _scalars(value: Any, fail: Any) -> list[dict[str, str]]:
    if isinstance(value, Mapping):
        return [{"name": str(k), "expr": _expr(v, "SCALARS", fail) or ""} for k, v in value.items()]
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, tuple | list) or not all(isinstance(v, str) for v in value):
        raise fail("SCALARS", "a tuple of size symbols, or a dict: argument name -> expression")
    return [{"name": v, "expr": v} for v in value]


def _samples(value: Any, fail: Any) -> dict[str, list[int]]:
    if not isinstance(value, Mapping) or not all(isinstance(v, tuple | list) for v in value.values()):
        raise fail("SAMPLES", "a dict: size symbol -> a tuple of the values generality samples it at")
    return {str(k): list(v) for k, v in value.items()}


def _ranges(value: Any, fail: Any, key: str = "RANGE") -> dict[str, list[float]]:
    if not isinstance(value, Mapping):
        raise fail(key, "a dict: input name -> (low, high)")
    ranges = {}
    for name, pair in value.items():
        if not isinstance(pair, tuple | list) or len(pair) != 2 or \
                not all(isinstance(v, int | float) and not isinstance(v, bool) for v in pair):
            raise fail(key, f"{name}: a pair of numbers (low, high)")
        ranges[str(name)] = [float(pair[0]), float(pair[1])]
    return ranges


def _tolerance(value: Any, fail: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise fail("TOLERANCE", "None, or a dict with any of factor, floor, rel_l2")
    return dict(value)


def _naive(value: Any, folder: Path, fail: Any) -> dict[str, str]:
    """NAIVE's texts: a value that names a file beside the problem file is that file's text."""
    if not isinstance(value, Mapping):
        raise fail("NAIVE", "a dict: backend -> kernel text or the name of a file beside the problem file")
    texts = {}
    for key, text in value.items():
        if not isinstance(text, str):
            raise fail("NAIVE", f"{key}: a kernel text or a file name")
        if "\n" not in text and text.strip().endswith(NAIVE_SUFFIXES):
            target = (folder / text.strip()).resolve()
            if target.parent != folder.resolve() and folder.resolve() not in target.parents:
                raise fail("NAIVE", f"{key}: {text!r} is outside the problem file's folder")
            try:
                text = target.read_text()
            except (OSError, UnicodeDecodeError) as exc:
                raise fail("NAIVE", f"{key}: cannot read {text!r} beside the problem file: {exc}") from None
        texts[str(key)] = text
    return texts


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m peak_mcp.problems.describe FILE", file=sys.stderr)
        return 2
    result = os.fdopen(os.dup(1), "w")  # the answer's channel; what the problem prints goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from peak_mcp.problems.loading import allow_problem_code

    allow_problem_code()
    try:
        answer: dict[str, Any] = {"declaration": describe_file(Path(args[0]).resolve())}
    except DescribeError as exc:
        answer = {"error": exc.message, "line": exc.line}
    except Exception as exc:  # a bug here, not in the file: still an answer the server can show
        answer = {"error": f"describing the file failed: {type(exc).__name__}: {exc}", "line": None}
    result.write(json.dumps(answer) + "\n")
    result.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
