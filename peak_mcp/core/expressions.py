"""Safe integer expressions, the language of launch annotations, problem declarations and tuning conditions:
parsed with `ast` and evaluated by a small interpreter that admits only integer literals, symbols, + - * // % and
cdiv/min/max (comparisons, `and`, `or`, `not` in conditions): never `eval`."""

from __future__ import annotations

import ast
import functools
from collections.abc import Mapping

from peak_mcp.core.errors import AnnotationError

FUNCTIONS = {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max}


MAX_EXPR_CHARS = 200  # an expression as written


MAX_EXPANDED_CHARS = 2000  # as evaluated, derived names written out (depth is bounded apart)


SM_COUNT = "SM_COUNT"  # the device symbol of launch expressions


def names_in(expr: str) -> set[str]:
    return {n.id for n in ast.walk(_parse(expr)) if isinstance(n, ast.Name)}


_COMPARE = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
            ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b}


def evaluate_condition(expr: str, sizes: Mapping[str, int], *, where: str = "condition",
                       derived_out: bool = False) -> bool:
    """A condition over size expressions: comparisons joined by and / or / not, e.g. `M % 128 == 0 and K >= 64`."""
    if len(expr) > 4 * MAX_EXPR_CHARS and not derived_out:
        raise AnnotationError(f"{where}: condition is longer than {4 * MAX_EXPR_CHARS} characters", None)
    if len(expr) > 4 * MAX_EXPANDED_CHARS:
        raise AnnotationError(f"{where}: condition is longer than {4 * MAX_EXPANDED_CHARS} characters with its "
                              "derived names written out", None)
    try:
        tree = _parse(expr)
    except SyntaxError as exc:
        raise AnnotationError(f"{where}: cannot parse {expr!r}: {exc.msg}",
                              "write comparisons of size expressions joined by and/or/not, e.g. M % 128 == 0.") \
            from None
    try:
        return _truth(tree.body, sizes, expr, where)
    except RecursionError:
        raise _too_deep(where) from None


def _too_deep(where: str) -> AnnotationError:
    """An expression nested deeper than the interpreter's recursion (a `where` of 1,600 characters of `- - - 1`)
    was a RecursionError: an internal error that left the submitted version pending."""
    return AnnotationError(f"{where}: the expression is nested too deeply", "write it without the repeated signs, "
                           "`not` or brackets.")


@functools.lru_cache(maxsize=512)
def _parse(expr: str) -> ast.Expression:
    """Parsed once: a tuning run evaluates the same conditions for every configuration of its space."""
    return ast.parse(expr.strip(), mode="eval")


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
    if len(expr) > MAX_EXPANDED_CHARS:  # what the agent wrote was held to MAX_EXPR_CHARS at parse time
        raise AnnotationError(f"{where}: expression is longer than {MAX_EXPANDED_CHARS} characters with its "
                              "derived names written out", None)
    try:
        tree = _parse(expr)
    except SyntaxError as exc:
        raise AnnotationError(f"{where}: cannot parse {expr!r}: {exc.msg}",
                              "use integers, size symbols, + - * // % and cdiv/min/max.") from None
    try:
        return _eval(tree.body, sizes, expr, where)
    except RecursionError:
        raise _too_deep(where) from None


def _eval(node: ast.AST, sizes: Mapping[str, int], expr: str, where: str) -> int:
    def bad(why: str) -> AnnotationError:
        allowed = ", ".join(sorted(sizes))
        return AnnotationError(f"{where}: {why} in {expr!r}",
                               f"allowed: integer literals, symbols {allowed}, + - * // %, cdiv(a, b), min, max.")

    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        if node.id == SM_COUNT and node.id not in sizes:
            raise AnnotationError(f"{where}: SM_COUNT in {expr!r} is bound to a session's device", None)
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
        func = FUNCTIONS.get(node.func.id)
        if func is None:
            raise bad(f"function {node.func.id!r} is not allowed")
        args = [_eval(a, sizes, expr, where) for a in node.args]
        if node.func.id == "cdiv" and (len(args) != 2 or args[1] == 0):
            raise bad("cdiv takes two arguments and a non-zero divisor")
        if node.func.id in ("min", "max") and len(args) < 2:
            raise bad(f"{node.func.id} takes at least two arguments")
        return int(func(*args))
    raise bad(f"{type(node).__name__} is not allowed")
