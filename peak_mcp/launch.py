"""The `// peak:` annotation line: entry point and launch geometry as safe integer expressions.

    // peak: entry=sgemm grid=(cdiv(N, 64), cdiv(M, 64), 1) block=(256, 1, 1) shared=0
    // peak: entry=main groups=(cdiv(N, 64), cdiv(M, 64), 1)

Expressions are parsed with `ast` and evaluated by a small interpreter that admits only integer
literals, the problem's size symbols, + - * // % and cdiv/min/max: never `eval`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping

from pydantic import BaseModel

from peak_mcp.errors import AnnotationError

_LINE = re.compile(r"^\s*(?://|#|;)\s*peak\s*:(?P<body>.*)$", re.MULTILINE)
_KEY = re.compile(r"(\w+)\s*=")
_FUNCS = {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max}
_MAX_EXPR_CHARS = 200


class LaunchSpec(BaseModel):
    """The parsed annotation: expressions are kept as text and evaluated per size set."""

    entry: str
    grid: tuple[str, str, str] | None = None  # CUDA / HIP
    block: tuple[str, str, str] | None = None  # CUDA / HIP
    groups: tuple[str, str, str] | None = None  # HLSL dispatch size
    shared: str = "0"  # dynamic shared memory bytes (CUDA / HIP)
    line: int  # 1-based line of the annotation in the source

    def evaluate(self, sizes: Mapping[str, int]) -> dict[str, tuple[int, int, int] | int]:
        out: dict[str, tuple[int, int, int] | int] = {}
        for name in ("grid", "block", "groups"):
            exprs = getattr(self, name)
            if exprs is not None:
                dims = tuple(evaluate(e, sizes, where=f"{name}") for e in exprs)
                if any(d < 1 for d in dims):
                    raise AnnotationError(
                        f"{name}={dims} at sizes {dict(sizes)}: every dimension must be >= 1",
                        "check the expression; cdiv(N, TILE) is the usual form.",
                    )
                out[name] = dims  # type: ignore[assignment]
        shared = evaluate(self.shared, sizes, where="shared")
        if shared < 0:
            raise AnnotationError(f"shared={shared} is negative", "shared is a byte count >= 0.")
        out["shared"] = shared
        return out


def parse_annotation(source: str, *, needs: tuple[str, ...], symbols: tuple[str, ...]) -> LaunchSpec:
    """Find and parse the single `peak:` line. `needs` names the keys the backend requires."""
    matches = list(_LINE.finditer(source))
    example = _example(needs)
    if not matches:
        raise AnnotationError("the kernel has no `// peak:` annotation line", f"add one, e.g.\n    {example}")
    if len(matches) > 1:
        lines = [source.count("\n", 0, m.start()) + 1 for m in matches]
        raise AnnotationError(f"found {len(matches)} `peak:` lines (lines {lines}); exactly one is allowed",
                              "keep the one that matches the kernel's tiling and delete the others.")
    match = matches[0]
    line_no = source.count("\n", 0, match.start()) + 1
    fields = _split_fields(match.group("body"), line_no)
    unknown = set(fields) - {"entry", "grid", "block", "groups", "shared"}
    if unknown:
        raise AnnotationError(f"line {line_no}: unknown annotation key(s) {sorted(unknown)}", f"use e.g. {example}")
    missing = [k for k in needs if k not in fields]
    if missing:
        raise AnnotationError(f"line {line_no}: the annotation lacks {missing}", f"use e.g. {example}")
    entry = fields.get("entry", "")
    if not re.fullmatch(r"[A-Za-z_]\w*", entry):
        raise AnnotationError(f"line {line_no}: entry={entry!r} is not an identifier", "name the kernel function.")
    spec = LaunchSpec(
        entry=entry,
        grid=_triple(fields, "grid", line_no),
        block=_triple(fields, "block", line_no),
        groups=_triple(fields, "groups", line_no),
        shared=fields.get("shared", "0"),
        line=line_no,
    )
    # Validate every expression now, with dummy sizes, so syntax errors surface at submit time.
    probe = dict.fromkeys(symbols, 1024)
    for name in ("grid", "block", "groups"):
        for expr in getattr(spec, name) or ():
            evaluate(expr, probe, where=f"line {line_no} {name}")
    evaluate(spec.shared, probe, where=f"line {line_no} shared")
    return spec


def _example(needs: tuple[str, ...]) -> str:
    if "groups" in needs:
        return "// peak: entry=main groups=(cdiv(N, 16), cdiv(M, 16), 1)"
    return "// peak: entry=kernel grid=(cdiv(N, 16), cdiv(M, 16), 1) block=(16, 16, 1) shared=0"


def _split_fields(body: str, line_no: int) -> dict[str, str]:
    """Split `k=v k=(a, b)` respecting parentheses."""
    fields: dict[str, str] = {}
    pos, body = 0, body.strip()
    while pos < len(body):
        key_match = _KEY.match(body, pos)
        if not key_match:
            raise AnnotationError(f"line {line_no}: cannot read the annotation near {body[pos:pos + 30]!r}",
                                  "write key=value pairs separated by spaces.")
        key, pos, depth, start = key_match.group(1), key_match.end(), 0, key_match.end()
        while pos < len(body) and (depth > 0 or not body[pos].isspace()):
            depth += {"(": 1, ")": -1}.get(body[pos], 0)
            pos += 1
        # A value may contain spaces inside parentheses; keep reading until depth returns to 0.
        fields[key] = body[start:pos].strip()
        while pos < len(body) and body[pos].isspace():
            pos += 1
        if key in fields and depth != 0:
            raise AnnotationError(f"line {line_no}: unbalanced parentheses in {key}=", "close every '('.")
    return fields


def _triple(fields: dict[str, str], key: str, line_no: int) -> tuple[str, str, str] | None:
    text = fields.get(key)
    if text is None:
        return None
    if not (text.startswith("(") and text.endswith(")")):
        raise AnnotationError(f"line {line_no}: {key}={text} must be a parenthesized triple",
                              f"write {key}=(x, y, z).")
    parts = _split_top_level(text[1:-1])
    if not 1 <= len(parts) <= 3:
        raise AnnotationError(f"line {line_no}: {key} has {len(parts)} components", f"write {key}=(x, y, z).")
    parts += ["1"] * (3 - len(parts))
    return (parts[0], parts[1], parts[2])


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(ch, 0)
        current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


_COMPARE = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
            ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b}


def evaluate_condition(expr: str, sizes: Mapping[str, int], *, where: str = "condition") -> bool:
    """A condition over size expressions: comparisons joined by and / or / not, e.g. `M % 128 == 0 and K >= 64`."""
    if len(expr) > 4 * _MAX_EXPR_CHARS:
        raise AnnotationError(f"{where}: condition is longer than {4 * _MAX_EXPR_CHARS} characters", None)
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as exc:
        raise AnnotationError(f"{where}: cannot parse {expr!r}: {exc.msg}",
                              "write comparisons of size expressions joined by and/or/not, e.g. M % 128 == 0.") \
            from None
    return _truth(tree.body, sizes, expr, where)


def _truth(node: ast.AST, sizes: Mapping[str, int], expr: str, where: str) -> bool:
    if isinstance(node, ast.BoolOp):
        values = [_truth(v, sizes, expr, where) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _truth(node.operand, sizes, expr, where)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, sizes, expr, where)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node, sizes, expr, where)
            if type(op) not in _COMPARE:
                raise AnnotationError(f"{where}: comparison {type(op).__name__} is not allowed in {expr!r}", None)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    raise AnnotationError(f"{where}: {expr!r} is not a condition",
                          "write comparisons of size expressions joined by and/or/not, e.g. M % 128 == 0.")


def evaluate(expr: str, sizes: Mapping[str, int], *, where: str = "expression") -> int:
    """Evaluate an integer size expression safely."""
    if len(expr) > _MAX_EXPR_CHARS:
        raise AnnotationError(f"{where}: expression is longer than {_MAX_EXPR_CHARS} characters", None)
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as exc:
        raise AnnotationError(f"{where}: cannot parse {expr!r}: {exc.msg}",
                              "use integers, size symbols, + - * // % and cdiv/min/max.") from None
    return _eval(tree.body, sizes, expr, where)


def _eval(node: ast.AST, sizes: Mapping[str, int], expr: str, where: str) -> int:
    def bad(why: str) -> AnnotationError:
        allowed = ", ".join(sorted(sizes))
        return AnnotationError(f"{where}: {why} in {expr!r}",
                               f"allowed: integer literals, symbols {allowed}, + - * // %, cdiv(a, b), min, max.")

    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in sizes:
            raise bad(f"unknown symbol {node.id!r}")
        return int(sizes[node.id])
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, sizes, expr, where)
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, sizes, expr, where), _eval(node.right, sizes, expr, where)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            if abs(left) > 2**40 or abs(right) > 2**40:
                raise bad("value too large")
            return left * right
        if isinstance(node.op, ast.FloorDiv | ast.Mod):
            if right == 0:
                raise bad("division by zero")
            return left // right if isinstance(node.op, ast.FloorDiv) else left % right
        raise bad(f"operator {type(node.op).__name__} is not allowed (use // for division)")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        func = _FUNCS.get(node.func.id)
        if func is None:
            raise bad(f"function {node.func.id!r} is not allowed")
        args = [_eval(a, sizes, expr, where) for a in node.args]
        if node.func.id == "cdiv" and (len(args) != 2 or args[1] == 0):
            raise bad("cdiv takes two arguments and a non-zero divisor")
        if node.func.id in ("min", "max") and len(args) < 2:
            raise bad(f"{node.func.id} takes at least two arguments")
        return int(func(*args))
    raise bad(f"{type(node).__name__} is not allowed")
