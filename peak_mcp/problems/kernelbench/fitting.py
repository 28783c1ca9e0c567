"""Sizes as expressions: each dimension a module's inputs and outputs take over the probe rounds, explained by the
simplest expression of the size variables that matches every round; the rounds themselves; the FLOPs fitted the
same way."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from peak_mcp.problems.kernelbench.rules import (
    CONSECUTIVE_ROUNDS,
    MAX_CANDIDATES,
    MAX_DIVISOR,
    MAX_FACTOR,
    MAX_FLOP_SYMBOLS,
    MAX_OFFSET,
    PROBE_POOLS,
    PROBE_ROUNDS,
    KernelBenchError,
)


@dataclass(frozen=True)
class Expr:
    """A fitted dimension: `factor * prod(symbols)` when `kind` is "product", `(factor * S + const) // divisor` when
    "affine", `sum(symbols) + const` when "sum", `const` when "const". `text()` is the declaration's spelling."""

    kind: str
    symbols: tuple[str, ...] = ()
    factor: int = 1
    const: int = 0
    divisor: int = 1

    def __call__(self, values: Mapping[str, int]) -> int:
        if self.kind == "const":
            return self.const
        if self.kind == "affine":
            return (self.factor * values[self.symbols[0]] + self.const) // self.divisor
        if self.kind == "product":
            return self.factor * math.prod(values[s] for s in self.symbols)
        return sum(values[s] for s in self.symbols) + self.const

    def text(self, names: Mapping[str, str] | None = None) -> str:
        syms = [names[s] if names else s for s in self.symbols]
        if self.kind == "const":
            return str(self.const)
        if self.kind == "product":
            return " * ".join(([str(self.factor)] if self.factor != 1 else []) + syms)
        body = f"{self.factor} * {syms[0]}" if self.kind == "affine" and self.factor != 1 else " + ".join(syms)
        if self.const:
            body += f" {'+' if self.const > 0 else '-'} {abs(self.const)}"
        if self.divisor != 1:
            body = f"({body}) // {self.divisor}" if body != syms[0] else f"{body} // {self.divisor}"
        return body


def fit_dimension(seen: Sequence[int], rounds: Sequence[Mapping[str, int]]) -> Expr | None:
    """The simplest expression over the variables of `rounds` that gives `seen[r]` in every round r, or None.

    Tried in order: a constant; a variable; `a * S + b`; `(a * S + b) // k`; a product of two or three variables
    times a constant; a sum of two variables plus a constant. Every candidate is checked against every round."""
    seen = [int(v) for v in seen]
    if len(set(seen)) == 1:
        return Expr("const", const=seen[0])
    names = list(rounds[0])

    def fits(expr: Expr) -> bool:
        return all(expr(r) == v for r, v in zip(rounds, seen, strict=True))

    for s in names:
        if fits(Expr("affine", (s,))):
            return Expr("affine", (s,))
    linear: list[Expr] = []
    for s in names:
        x0, x1 = rounds[0][s], rounds[1][s]
        if x0 == x1 or (seen[1] - seen[0]) % (x1 - x0):
            continue
        a = (seen[1] - seen[0]) // (x1 - x0)
        b = seen[0] - a * x0
        if 1 <= a <= MAX_FACTOR and abs(b) <= MAX_OFFSET and fits(Expr("affine", (s,), a, b)):
            linear.append(Expr("affine", (s,), a, b))
    if linear:
        return min(linear, key=lambda e: (e.factor != 1, abs(e.const), e.factor))
    for k in range(2, MAX_DIVISOR + 1):
        for a in range(1, 5):
            for b in sorted(range(-MAX_OFFSET, MAX_OFFSET + 1), key=abs):
                for s in names:
                    if fits(Expr("affine", (s,), a, b, k)):
                        return Expr("affine", (s,), a, b, k)
    for size in (2, 3):
        for group in itertools.combinations(names, size):
            p0 = math.prod(rounds[0][s] for s in group)
            if seen[0] % p0 == 0 and seen[0] // p0 >= 1 and fits(Expr("product", group, seen[0] // p0)):
                return Expr("product", group, seen[0] // p0)
    for group in itertools.combinations(names, 2):
        b = seen[0] - sum(rounds[0][s] for s in group)
        if abs(b) <= MAX_OFFSET and fits(Expr("sum", group, const=b)):
            return Expr("sum", group, const=b)
    return None


def latin_rounds(variables: Sequence[str], pool: Sequence[int], count: int = PROBE_ROUNDS,
                 mixed: bool = True) -> list[dict[str, int]]:
    """`count` assignments of values from `pool` to `variables`, no two variables alike within a round, every
    variable moving from round to round. `mixed`: variable i takes pool[(r + i * (r + 1)) % w] in round r, w the
    least prime >= max(7, n + 2): the difference of two variables changes from round to round too, so no variable
    passes for another plus a constant. Not mixed: pool[(i + r) % w], w >= max(count, n + 2), so that each variable
    walks through consecutive pool entries."""
    n = len(variables)
    if mixed:
        width = next(w for w in itertools.count(max(7, n + 2)) if all(w % d for d in range(2, w)))
    else:
        width = max(6, n + 2, count)
    if width > len(pool):
        raise KernelBenchError(f"get_inputs reads {n} int variables; at most {MAX_CANDIDATES} can be probed",
                               "keep the module-level ints that get_inputs reads to the sizes")
    if mixed:
        return [{v: pool[(r + i * (r + 1)) % width] for i, v in enumerate(variables)} for r in range(count)]
    return [{v: pool[(i + r) % width] for i, v in enumerate(variables)} for r in range(count)]


def probe_rounds(variables: Sequence[str], pool: int = 0) -> list[dict[str, int]]:
    """The probe rounds of PROBE_POOLS[pool]: PROBE_ROUNDS of spread values, then CONSECUTIVE_ROUNDS of consecutive
    ones (each variable takes CONSECUTIVE_ROUNDS consecutive integers)."""
    spread, start = PROBE_POOLS[pool]
    rounds = latin_rounds(variables, spread)
    if start is not None:
        consecutive = tuple(range(start, start + max(len(variables) + 2, CONSECUTIVE_ROUNDS) + 1))
        rounds += latin_rounds(variables, consecutive, CONSECUTIVE_ROUNDS, mixed=False)
    return rounds


def fit_shapes(what: str, shapes: Sequence[tuple[int, ...]], rounds: Sequence[Mapping[str, int]],
                names: Mapping[str, str] | None = None) -> tuple[Expr, ...]:
    ranks = {len(s) for s in shapes}
    if len(ranks) != 1:
        raise KernelBenchError(f"{what} has a different number of dimensions at different sizes: "
                               f"{[list(s) for s in shapes]}")
    fitted = []
    for axis in range(ranks.pop()):
        seen = [s[axis] for s in shapes]
        expr = fit_dimension(seen, rounds)
        if expr is None:
            probes = "; ".join(f"{sizes_text({(names or {}).get(k, k): v for k, v in r.items()})} -> {d}"
                               for r, d in zip(rounds, seen, strict=True))
            raise KernelBenchError(
                f"{what}: dimension {axis} is not a constant or a simple expression of the size variables "
                f"(seen {probes})",
                "dimensions must be a size, a constant, a * size + b, (a * size + b) // k, or a product or sum of "
                "sizes: a shape that grows non-linearly (dim * dim, 2 ** n) cannot be declared")
        fitted.append(expr)
    return tuple(fitted)


def fit_flops(counts: Sequence[int | None], rounds: Sequence[Mapping[str, int]],
               out_exprs: Sequence[tuple[Expr, ...]], names: Mapping[str, str], notes: list[str]) -> str | int:
    """FLOPS as an expression from torch's counts over the probe rounds: `c * S1 * S2 ...` (a monomial of the
    sizes, matmul's `2 * M * N * K`), else `c * (elements of an output) * S ...` (a convolution's
    `2 * out elements * C_in * k * k`, with k constant); 0 with a note where neither fits."""
    if any(c is None for c in counts):
        return 0
    values = [int(c) for c in counts if c is not None]
    if not any(values):
        notes.append("FLOPS 0: torch's flop counter counts no matrix product or convolution here")
        return 0
    variables = list(rounds[0])
    if 0 not in values and len(variables) <= MAX_FLOP_SYMBOLS:
        logs = np.array([[1.0] + [math.log(r[v]) for v in variables] for r in rounds])
        solution, *_ = np.linalg.lstsq(logs, np.log(np.array(values, dtype=np.float64)), rcond=None)
        powers = [round(p) for p in solution[1:]]
        if all(0 <= p <= 4 and abs(p - x) < 1e-6 for p, x in zip(powers, solution[1:], strict=True)):
            factors = [v for v, p in zip(variables, powers, strict=True) for _ in range(p)]
            text = _flops_text(values, rounds, [Expr("affine", (v,)) for v in factors], names)
            if text:
                return text
    for dims in out_exprs:
        for size in range(4):
            for group in itertools.combinations(variables, size):
                text = _flops_text(values, rounds, [*dims, *(Expr("affine", (v,)) for v in group)], names)
                if text:
                    return text
    notes.append("FLOPS 0: the counted work is not a product of the sizes, nor of an output's elements and sizes")
    return 0


def _flops_text(values: Sequence[int], rounds: Sequence[Mapping[str, int]], factors: Sequence[Expr],
                names: Mapping[str, str]) -> str | None:
    """`c * factor * ...` if `values[r] == c * prod(factor(rounds[r]))` for one integer c >= 1 in every round."""
    scales = set()
    for v, r in zip(values, rounds, strict=True):
        d = math.prod(f(r) for f in factors)
        if d <= 0 or v % d:
            return None
        scales.add(v // d)
    if len(scales) != 1 or (c := scales.pop()) < 1:
        return None
    c *= math.prod(f.const for f in factors if f.kind == "const")
    parts = [f.text(names) for f in factors if f.kind != "const"]
    parts = [p if re.fullmatch(r"\w+", p) else f"({p})" for p in parts]
    return " * ".join(([str(c)] if c != 1 or not parts else []) + parts)


def evaluate_expression(text: str, env: Mapping[str, int]) -> int:
    """Evaluates the expressions this module writes (integers, symbols, + - * //, parentheses), without eval."""
    tokens = re.findall(r"\d+|[A-Za-z_]\w*|//|[-+*()]", text)
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def atom() -> int:
        tok = take()
        if tok == "(":
            value = expr()
            take()
            return value
        if tok == "-":
            return -atom()
        return int(tok) if tok.isdigit() else int(env[tok])

    def term() -> int:
        value = atom()
        while peek() in ("*", "//"):
            value = value * atom() if take() == "*" else value // atom()
        return value

    def expr() -> int:
        value = term()
        while peek() in ("+", "-"):
            value = value + term() if take() == "+" else value - term()
        return value

    return expr()


def sizes_text(values: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items()) or "the module's values"
