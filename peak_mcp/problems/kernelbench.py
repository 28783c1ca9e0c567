"""KernelBench problem files, translated into the declaration of docs/problems.md.

A KernelBench file is a Python module with module-level int sizes (`batch_size = 16; dim = 16384`), a
`class Model(torch.nn.Module)` built as `Model(*get_init_inputs())` and called as `model(*get_inputs())`.
`declare_kernelbench(module, name)` turns an imported one into a `KernelBenchProblem`: the declaration (pure data,
the upper-case names of a problem file) plus the callables a problem file defines (`reference`, `generate`,
`torch_reference`). It runs where problem code may run: in the describe subprocess or a worker, never in the
server. It imports nothing the module did not: a module that uses torch brings torch; a torch-free module (numpy
arrays from `get_inputs`, a plain class `Model`) is translated the same way, without torch.

Hangs: importing the module, `get_inputs`, `Model(...)` and `forward` all run in the caller's process, with no
timer here. A file that hangs at import or while it is probed is stopped by the describe subprocess's timeout,
which reports it; nothing in this module guards against it.

The rules (tests/test_kernelbench.py checks each):

Size symbols. The candidates are the module's top-level `int` variables that `get_inputs` reads (directly or through
the module's own functions). `get_inputs` runs in probe rounds with them patched to small distinct values (five
rounds of primes, mixed so that no variable passes for another plus a constant, which trace each dimension to one
variable; then eight of consecutive integers, which pin down floor divisions), and each tensor dimension is
explained by the simplest expression that matches every round: a constant, a variable `S`, `a * S + b`, `(a * S + b)
// k`, a product of variables times a constant, or a sum of two variables plus a constant. The variables that
explain some dimension are the size symbols; the other ints (a reduction axis, `out_features`, a kernel size) stay
at their module values and are listed as `constants`. A candidate whose probe values make `get_inputs` fail is left
at its value too. A dimension no rule explains (`dim * dim`, `2 ** n`) is refused, naming the input, the axis and
the values seen. Symbols are the variable names upper-cased (`batch_size` -> `BATCH_SIZE`); `symbols` maps them
back; SCALARS lists them in the module's order.

Model probing. The model is built and run in the same rounds over the size symbols (other ints at their values).
Where the smallest values fail, larger pools are tried (primes from 17, multiples of 8, multiples of 32); each
symbol that then fails alone at a small prime gets a constraint (`S >= n`, the least n found by bisection; or
`S % 8 == 0`, GroupNorm's channels), kept where the module's own value meets it.

Inputs. The tensors of `get_inputs` in order, named after `forward`'s parameters (`x`, `A`, `B`; `x0, x1, ...`
for `*args`). They must be floating point (an integer or boolean tensor is refused). `generate` draws each like
`get_inputs` did, judged from the probe values: standard normal (randn), uniform in (0, 1) (rand), half-normal
(randn().abs()), or a constant c scaled by uniform [0.5, 1.5); never all zeros. A non-tensor item of `get_inputs`
that is the same in every round becomes a fixed argument (outside the ABI, in `fixed_arguments`); an int that
changes with the sizes is passed as the value of its fitted expression; any other is refused.

Parameters. A `torch.nn.Module`'s parameters (nn.Linear, nn.Conv2d, a norm's weight) become inputs after the
tensors of `get_inputs`, in `named_parameters()` order, named by their path with dots as underscores (`fc_weight`);
`reference` and `torch_reference` pass them through `torch.func.functional_call`. Their shapes are fitted like the
others. `generate` draws a parameter initialized to a constant c (a norm's 1 or 0) uniform in c +- 0.5, any other of
two or more dimensions uniform in +-1/sqrt(fan_in) (PyTorch's init of Linear and Conv), a vector uniform in
[-0.5, 0.5). Floating-point buffers are allowed where they do not change the output (BatchNorm's running statistics
in training mode, the module default, as KernelBench runs it); a buffer that does is refused by name.

Outputs. `forward` returns a tensor (output `out`) or a tuple or list of tensors (`out0`, `out1`, ...), fitted like
the inputs (a 0-d result, a loss, has shape `()`). Refused: an integer or boolean output (argmax), a non-tensor in
the result, a forward whose result changes between two calls on the same inputs (dropout in training mode).

Work. FLOPS comes from torch's FlopCounterMode (matrix products, convolutions and attention; elementwise work is
not counted) over the probe rounds, fitted as `c * S1 * S2 ...` (at most four symbols) or as `c * (the elements of
an output) * S ...` (a convolution); 0, with a note, where nothing is counted or neither fits. BYTES is left to the
default (every input read once, every output written once). NAIVE is empty: a KernelBench file has no kernel.

References. `reference(*inputs, **sizes)` takes float64 numpy arrays in INPUTS order and the sizes by symbol, builds
the model at those sizes (module variables patched while it runs, restored after; four models cached), converts it
to float64 and runs forward on copies of the inputs on `reference_device` (by default cuda where torch sees one when
it runs, else cpu); it returns float64 numpy arrays, one per output (a tuple for several).
`torch_reference(*tensors, **sizes)` runs the same model at the tensors' dtype and device (the yardstick; it does
not copy the inputs). Before returning, `declare_kernelbench` checks the reference on generated inputs at a probe
size: finite, and of the declared output shapes.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import itertools
import math
import re
import sys
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from peak_mcp.core.errors import InvalidInput

PROBE_ROUNDS = 5  # rounds of spread values (distinct primes), which trace every dimension to its variable
CONSECUTIVE_ROUNDS = 8  # rounds of consecutive values, which pin down floor divisions (every residue mod k <= 8)
# Value pools for the probe rounds, tried in order: small values first (cheap), larger ones for models that need
# room (a kernel of 7, say), then multiples of 8 and of 32 for models that need divisibility (GroupNorm's groups; no
# consecutive rounds there, so a floor division fitted on them is less certain).
PROBE_POOLS: tuple[tuple[tuple[int, ...], int | None], ...] = (
    ((5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59), 8),
    ((17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73), 24),
    (tuple(range(8, 121, 8)), None),
    (tuple(range(32, 481, 32)), None),
)
MAX_CANDIDATES = 11  # int variables read by get_inputs that can be probed together
MAX_PROBE_ELEMENTS = 1 << 24  # all inputs of one model-probe round together
MAX_OFFSET = 64  # |b| in a * S + b
MAX_FACTOR = 64  # a in a * S + b
MAX_DIVISOR = 16  # k in (a * S + b) // k
MAX_FLOP_SYMBOLS = 4
NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,39}")
DTYPES = ("f32", "f16", "bf16")


class KernelBenchError(InvalidInput):
    """A KernelBench file that cannot be translated; the message names what and where."""


# --- expressions -----------------------------------------------------------------------------------------------


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


# --- what the module reads --------------------------------------------------------------------------------------


def _codes(obj: Any) -> list[types.CodeType]:
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        return [c for f in (obj.fget, obj.fset) if f is not None for c in _codes(f)]
    if isinstance(obj, types.FunctionType):
        return [obj.__code__]
    if isinstance(obj, type):
        return [c for member in vars(obj).values() for c in _codes(member)]
    return []


def referenced_names(roots: Sequence[Any], namespace: Mapping[str, Any]) -> set[str]:
    """Global names the code of `roots` reads, following nested code and the module's own functions and classes."""
    module_name = namespace.get("__name__")
    stack = [c for root in roots for c in _codes(root)]
    seen: set[int] = set()
    names: set[str] = set()
    while stack:
        code = stack.pop()
        if id(code) in seen:
            continue
        seen.add(id(code))
        names.update(code.co_names)
        stack += [c for c in code.co_consts if isinstance(c, types.CodeType)]
        for name in code.co_names:
            value = namespace.get(name)
            own_function = isinstance(value, types.FunctionType) and value.__globals__ is namespace
            own_class = isinstance(value, type) and getattr(value, "__module__", None) == module_name
            if own_function or own_class:
                stack += _codes(value)
    return names


def int_variables(namespace: Mapping[str, Any], names: set[str]) -> list[str]:
    """Module-level ints (not bools) among `names`, in the module's definition order."""
    return [k for k, v in namespace.items()
            if k in names and not k.startswith("_") and type(v) is int]


@contextlib.contextmanager
def patched(namespace: dict[str, Any], values: Mapping[str, Any]) -> Iterator[None]:
    """Module variables set to `values` for the duration, restored after (also on error)."""
    saved = {k: namespace[k] for k in values}
    namespace.update(values)
    try:
        yield
    finally:
        namespace.update(saved)


# --- arrays, torch or numpy ------------------------------------------------------------------------------------


def _torch() -> Any | None:
    """torch if the problem module (or anything before it) imported it; never imported here."""
    return sys.modules.get("torch")


def _is_torch_tensor(x: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def _is_array(x: Any) -> bool:
    return isinstance(x, np.ndarray) or _is_torch_tensor(x)


def _element_kind(x: Any) -> str:
    if _is_torch_tensor(x):
        if x.is_complex():
            return "complex"
        if x.is_floating_point():
            return "float"
        return "bool" if x.dtype == _torch().bool else "integer"
    kind = np.asarray(x).dtype.kind
    return {"f": "float", "c": "complex", "b": "bool"}.get(kind, "integer")


def _a(word: str) -> str:
    return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


def _host64(x: Any) -> np.ndarray:
    if _is_torch_tensor(x):
        return x.detach().to("cpu", _torch().float64).numpy()
    return np.asarray(x, dtype=np.float64)


def _same(a: Any, b: Any) -> bool:
    return bool(np.array_equal(_host64(a), _host64(b), equal_nan=True))


def _outputs(result: Any) -> list[Any]:
    items = list(result) if isinstance(result, (tuple, list)) else [result]
    for i, item in enumerate(items):
        if not _is_array(item):
            where = f"item {i} of its result" if isinstance(result, (tuple, list)) else "its result"
            raise KernelBenchError(f"forward returned {type(item).__name__} as {where}; only tensors can be outputs",
                                   "return a tensor, or a tuple of tensors")
        kind = _element_kind(item)
        if kind != "float":
            raise KernelBenchError(f"forward returns {_a(kind)} tensor (output {i}); outputs must be floating point "
                                   "(an argmax or a mask cannot be checked against a float64 reference)")
    return items


# --- the probe --------------------------------------------------------------------------------------------------


@dataclass
class _Round:
    values: dict[str, int]
    inputs: list[Any]
    model: Any = None
    outputs: list[Any] = field(default_factory=list)
    params: list[tuple[str, Any]] = field(default_factory=list)
    flops: int | None = None


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def _sizes_text(values: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items()) or "the module's values"


class _Probe:
    def __init__(self, namespace: dict[str, Any], model_cls: Any, get_inputs: Callable[[], Any],
                 get_init_inputs: Callable[[], Any]) -> None:
        self.ns = namespace
        self.model_cls = model_cls
        self.get_inputs = get_inputs
        self.get_init_inputs = get_init_inputs
        self.torch = _torch()
        self.is_module = self.torch is not None and isinstance(model_cls, type) and issubclass(
            model_cls, self.torch.nn.Module)
        self.uses_torch = self.is_module  # or get_inputs gives torch tensors: set once they are seen

    @contextlib.contextmanager
    def seeded(self, seed: int) -> Iterator[None]:
        state = np.random.get_state()
        np.random.seed(seed)
        try:
            if self.torch is not None:
                with self.torch.random.fork_rng(devices=[]):
                    self.torch.manual_seed(seed)
                    yield
            else:
                yield
        finally:
            np.random.set_state(state)

    def call_inputs(self, values: Mapping[str, int], seed: int) -> list[Any]:
        with patched(self.ns, values), self.seeded(seed):
            try:
                got = self.get_inputs()
            except Exception as exc:
                raise KernelBenchError(f"get_inputs() raised {_short(exc)} (with {_sizes_text(values)})",
                                       "get_inputs must run at sizes other than the module's") from exc
        if _is_array(got):
            raise KernelBenchError("get_inputs() returned a tensor; it must return a list of inputs",
                                   "write `return [x]`")
        if not isinstance(got, (list, tuple)):
            raise KernelBenchError(f"get_inputs() returned {type(got).__name__}; it must return a list of inputs")
        return list(got)

    def build(self, values: Mapping[str, int], seed: int) -> Any:
        with patched(self.ns, values), self.seeded(seed):
            try:
                init = list(self.get_init_inputs())
            except Exception as exc:
                raise KernelBenchError(f"get_init_inputs() raised {_short(exc)} (with {_sizes_text(values)})") from exc
            try:
                return self.model_cls(*init)
            except Exception as exc:
                raise KernelBenchError(f"Model(*get_init_inputs()) raised {_short(exc)} "
                                       f"(with {_sizes_text(values)})") from exc

    def forward(self, model: Any, args: Sequence[Any], values: Mapping[str, int],
                overrides: Mapping[str, Any] | None = None, seed: int = 0) -> Any:
        """The model on `args` (copies: forward may work in place), variables patched, random generators seeded
        (`_check_model` runs it under two seeds to find a random forward), without autograd."""
        args = [a.clone() if _is_torch_tensor(a) else a.copy() if isinstance(a, np.ndarray) else a for a in args]
        with patched(self.ns, values), self.seeded(seed):
            if not self.uses_torch:
                return (model if callable(model) else model.forward)(*args)
            with self.torch.no_grad():
                if overrides:
                    return self.torch.func.functional_call(model, dict(overrides), tuple(args))
                return (model if callable(model) else model.forward)(*args)

    def converted(self, model: Any, device: Any, dtype: Any) -> Any:
        """An nn.Module moved to `device` and `dtype` (its floating parameters and buffers); anything else as is."""
        return model.to(device=device, dtype=dtype) if self.is_module else model

    def run(self, values: Mapping[str, int], seed: int) -> _Round:
        inputs = self.call_inputs(values, seed)
        model = self.build(values, seed)
        try:
            counter = None
            if self.uses_torch:
                from torch.utils.flop_counter import FlopCounterMode

                counter = FlopCounterMode(display=False)
            with counter if counter is not None else contextlib.nullcontext():
                result = self.forward(model, inputs, values)
        except KernelBenchError:
            raise
        except Exception as exc:
            raise KernelBenchError(f"forward raised {_short(exc)} (with {_sizes_text(values)})",
                                   "the model must run at sizes other than the module's") from exc
        params = list(model.named_parameters()) if self.is_module else []
        return _Round(dict(values), inputs, model, _outputs(result), params,
                      counter.get_total_flops() if counter is not None else None)


def _fit_shapes(what: str, shapes: Sequence[tuple[int, ...]], rounds: Sequence[Mapping[str, int]],
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
            probes = "; ".join(f"{_sizes_text({(names or {}).get(k, k): v for k, v in r.items()})} -> {d}"
                               for r, d in zip(rounds, seen, strict=True))
            raise KernelBenchError(
                f"{what}: dimension {axis} is not a constant or a simple expression of the size variables "
                f"(seen {probes})",
                "dimensions must be a size, a constant, a * size + b, (a * size + b) // k, or a product or sum of "
                "sizes: a shape that grows non-linearly (dim * dim, 2 ** n) cannot be declared")
        fitted.append(expr)
    return tuple(fitted)


def _distribution(values: np.ndarray) -> tuple[str, float]:
    """How get_inputs drew an input, from its probe values: (kind, constant)."""
    if values.size == 0:
        return "normal", 0.0
    lo, hi = float(values.min()), float(values.max())
    if lo == hi:
        return ("constant", lo) if lo != 0 else ("normal", 0.0)
    if lo >= 0 and hi <= 1:
        return "uniform01", 0.0
    if lo >= 0:
        return "halfnormal", 0.0
    return "normal", 0.0


def _draw(kind: str, constant: float, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if kind == "uniform01":
        out = rng.random(shape)
        out[out == 0] = 0.5  # never a zero from a draw of [0, 1)
        return out
    if kind == "halfnormal":
        return np.abs(rng.standard_normal(shape))
    if kind == "constant":
        return constant * rng.uniform(0.5, 1.5, shape)
    if kind == "weight":
        fan_in = math.prod(shape[1:]) or 1
        bound = 1.0 / math.sqrt(fan_in)
        return rng.uniform(-bound, bound, shape)
    if kind == "vector":
        return constant + rng.uniform(-0.5, 0.5, shape)
    return rng.standard_normal(shape)


def _identifier(text: str) -> str:
    out = re.sub(r"\W", "_", text)
    return out if out and not out[0].isdigit() else f"x_{out}"


def _unique(name: str, taken: set[str], suffix: str) -> str:
    while name in taken:
        name += suffix
    taken.add(name)
    return name


def kernelbench_name(stem: str) -> str:
    """A problem name (`[a-z][a-z0-9_]{0,39}`) from a KernelBench file's stem: `19_ReLU` -> `kb_19_relu`."""
    name = re.sub(r"_+", "_", re.sub(r"[^a-z0-9]", "_", stem.lower())).strip("_") or "problem"
    if not name[0].isalpha():
        name = f"kb_{name}"
    return name[:40].rstrip("_")


def looks_like_kernelbench(namespace: Mapping[str, Any]) -> bool:
    """A module namespace in KernelBench form: a class `Model` and a function `get_inputs`, and no declaration of
    its own (`NAME`)."""
    return isinstance(namespace.get("Model"), type) and callable(namespace.get("get_inputs")) \
        and "NAME" not in namespace


# --- the result -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelBenchProblem:
    """A translated KernelBench file.

    `declaration` holds the upper-case names of docs/problems.md (NAME, TITLE, SIZES, DTYPES, INPUTS, OUTPUTS,
    SCALARS, FLOPS, BYTES, CONSTRAINTS, RANGE, TOLERANCE, NAIVE), as plain data: shapes and FLOPS are expression
    strings over the symbols. NAIVE is empty: a KernelBench file has no naive kernel.

    `reference(*inputs, **sizes)`: float64 numpy inputs in INPUTS order, sizes by symbol; returns one float64 numpy
    array per output (a tuple when there are several). `generate(name, shape, rng)`: float64 numpy values for input
    `name`. `torch_reference(*tensors, **sizes)`: the model at the tensors' dtype and device; None without torch."""

    declaration: dict[str, Any]
    reference: Callable[..., Any]
    generate: Callable[[str, tuple[int, ...], np.random.Generator], np.ndarray]
    torch_reference: Callable[..., Any] | None
    symbols: dict[str, str]  # ABI symbol -> module variable
    constants: dict[str, int]  # module ints held at their values
    parameters: dict[str, str]  # ABI input name -> model parameter path
    fixed_arguments: dict[int, Any]  # forward position -> the non-tensor value get_inputs gives there
    distributions: dict[str, str]  # input name -> how `generate` draws it
    notes: tuple[str, ...] = ()
    reference_device: str | None = None  # None: cuda where torch sees one when `reference` runs, else cpu

    def namespace(self) -> dict[str, Any]:
        """The problem as the attributes of a problem file: the declaration plus its callables."""
        out: dict[str, Any] = {**self.declaration, "reference": self.reference, "generate": self.generate}
        if self.torch_reference is not None:
            out["torch_reference"] = self.torch_reference
        return out


def declare_kernelbench(module: types.ModuleType | dict[str, Any], name: str, *, title: str | None = None,
                        reference_device: str | None = None) -> KernelBenchProblem:
    """Translate an imported KernelBench module (or its globals dict) into a `KernelBenchProblem` named `name`.
    Raises KernelBenchError, naming what and where, for a file that cannot be translated. See the module docstring
    for the rules."""
    if not NAME_PATTERN.fullmatch(name):
        raise KernelBenchError(f"problem name {name!r} does not match [a-z][a-z0-9_]{{0,39}}",
                               "kernelbench_name(file stem) gives one")
    ns = module.__dict__ if isinstance(module, types.ModuleType) else module
    model_cls = ns.get("Model")
    if not isinstance(model_cls, type):
        raise KernelBenchError("no class Model in the file", "KernelBench files define `class Model(nn.Module)`")
    get_inputs = ns.get("get_inputs")
    if not callable(get_inputs):
        raise KernelBenchError("no function get_inputs in the file",
                               "define `def get_inputs(): return [torch.randn(batch_size, dim)]`")
    notes: list[str] = []
    get_init_inputs = ns.get("get_init_inputs")
    if not callable(get_init_inputs):
        notes.append("no get_init_inputs: Model() is built with no arguments")

        def get_init_inputs() -> list[Any]:
            return []
    # get_inputs' globals are what it reads: patch those (a dict of globals is its own namespace).
    ns = getattr(get_inputs, "__globals__", ns)
    probe = _Probe(ns, model_cls, get_inputs, get_init_inputs)

    # 1. Size symbols: the ints get_inputs reads whose values shape its tensors.
    candidates = int_variables(ns, referenced_names([get_inputs], ns))
    if len(candidates) > MAX_CANDIDATES:
        raise KernelBenchError(f"get_inputs reads {len(candidates)} int variables ({', '.join(candidates)}); at most "
                               f"{MAX_CANDIDATES} can be probed")
    rounds, observed = _probe_inputs(probe, candidates)
    first = observed[0]
    n_items = len(first)
    if any(len(items) != n_items for items in observed):
        raise KernelBenchError("get_inputs returns a different number of inputs at different sizes")
    arg_names = _forward_names(model_cls, n_items)
    probe.uses_torch = probe.uses_torch or any(_is_torch_tensor(item) for item in first)
    tensor_positions = [i for i, item in enumerate(first) if _is_array(item)]
    if not tensor_positions:
        raise KernelBenchError("get_inputs returns no tensor", "a problem needs at least one input tensor")
    input_exprs: dict[int, tuple[Expr, ...]] = {}
    for i in tensor_positions:
        if not all(_is_array(items[i]) for items in observed):
            raise KernelBenchError(f"input {i} ({arg_names[i]}) of get_inputs is a tensor at some sizes only")
        kind = _element_kind(first[i])
        if kind != "float":
            raise KernelBenchError(f"input {i} ({arg_names[i]}) of get_inputs is {_a(kind)} tensor; inputs must be "
                                   "floating point (they are stored in the session's dtype)")
        input_exprs[i] = _fit_shapes(f"input {arg_names[i]}", [tuple(items[i].shape) for items in observed], rounds)
    used = [v for v in candidates if any(v in e.symbols for exprs in input_exprs.values() for e in exprs)]
    fixed: dict[int, Any] = {}
    scalar_exprs: dict[int, Expr] = {}
    for i, item in enumerate(first):
        if i in input_exprs:
            continue
        seen = [items[i] for items in observed]
        if all(type(v) is type(item) and v == item for v in seen):
            fixed[i] = item
            notes.append(f"argument {i} ({arg_names[i]}) of forward is the constant {item!r} get_inputs gives")
            continue
        expr = fit_dimension(seen, [{v: r[v] for v in used} for r in rounds]) if used and all(
            type(v) is int for v in seen) else None
        if expr is None:
            raise KernelBenchError(f"argument {i} ({arg_names[i]}) of get_inputs is a {type(item).__name__} that "
                                   f"changes with the sizes ({seen}) and is not an expression of them",
                                   "pass tensors, or constants")
        scalar_exprs[i] = expr
    if not used:
        notes.append("no input dimension depends on a module variable: the problem has no size symbols")
    constants = {k: ns[k] for k in ns if not k.startswith("_") and type(ns[k]) is int and k not in used}

    # ABI names: symbols upper-cased, inputs after forward's parameters, then the model's parameters.
    taken: set[str] = set()
    symbol_of = {v: _unique(_identifier(v).upper(), taken, "_") for v in used}
    symbols = {s: v for v, s in symbol_of.items()}
    input_name = {i: _unique(_identifier(arg_names[i]), taken, "_in") for i in tensor_positions}

    # 2. The model at probe sizes: parameters, outputs, work.
    model_rounds, needs = _probe_model(probe, used, input_exprs, notes)
    constraints = []
    for v, (op, n) in needs.items():
        text = f"{symbol_of[v]} >= {n}" if op == ">=" else f"{symbol_of[v]} % {n} == 0"
        if ns[v] >= n if op == ">=" else ns[v] % n == 0:
            constraints.append(text)
        else:
            notes.append(f"{symbol_of[v]} = {ns[v]} does not meet {text}, which probing suggested")
    base = model_rounds[0]
    size_rounds = [{symbol_of[v]: r.values[v] for v in used} for r in model_rounds]
    var_rounds = [r.values for r in model_rounds]
    param_paths = [p for p, _ in base.params]
    for r in model_rounds:
        if [p for p, _ in r.params] != param_paths:
            raise KernelBenchError("the model's parameters change with the sizes")
    param_name: dict[str, str] = {}
    param_exprs: dict[str, tuple[Expr, ...]] = {}
    for k, (path, tensor) in enumerate(base.params):
        if not tensor.is_floating_point():
            raise KernelBenchError(f"parameter {path} of the model is not floating point")
        param_name[path] = _unique(_identifier(path.replace(".", "_")), taken, "_p")
        param_exprs[path] = _fit_shapes(f"parameter {path}", [tuple(r.params[k][1].shape) for r in model_rounds],
                                        var_rounds)
    if base.params:
        notes.append(f"the model's parameters are inputs after get_inputs' tensors: "
                     f"{', '.join(param_name[p] for p in param_paths)}")
    n_out = len(base.outputs)
    if any(len(r.outputs) != n_out for r in model_rounds):
        raise KernelBenchError("forward returns a different number of outputs at different sizes")
    out_names = [_unique("out" if n_out == 1 else f"out{j}", taken, "_") for j in range(n_out)]
    out_exprs = [_fit_shapes(f"output {out_names[j]}", [tuple(r.outputs[j].shape) for r in model_rounds], var_rounds)
                 for j in range(n_out)]
    _check_model(probe, base, notes)
    batch = _independent_rows(probe, base, input_exprs, out_exprs, list(param_exprs.values()))
    if batch is not None:
        notes.append(f"outputs are independent along {symbol_of[batch]} (probed: changing one row of the inputs "
                     "changed only that row of every output): the host check recomputes only the rows it checks")
    flops = _fit_flops([r.flops for r in model_rounds], var_rounds, out_exprs, {v: symbol_of[v] for v in used},
                       notes)

    # 3. Generation: every input drawn like get_inputs drew it, parameters like PyTorch initializes them.
    distributions: dict[str, tuple[str, float]] = {}
    for i in tensor_positions:
        values = np.concatenate([_host64(r.inputs[i]).ravel() for r in model_rounds])
        distributions[input_name[i]] = _distribution(values)
    for path, tensor in base.params:
        init = _host64(tensor)
        if init.size and np.all(init == init.flat[0]):  # a norm's weight (1) or bias (0)
            distributions[param_name[path]] = ("vector", float(init.flat[0]))
        else:
            distributions[param_name[path]] = ("weight" if tensor.dim() >= 2 else "vector", 0.0)

    def generate(input_name_: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        kind, const = distributions.get(input_name_, ("normal", 0.0))
        return _draw(kind, const, tuple(int(d) for d in shape), rng)

    names = {v: symbol_of[v] for v in used}
    inputs_decl = {input_name[i]: tuple(e.text(names) for e in input_exprs[i]) for i in tensor_positions}
    inputs_decl |= {param_name[p]: tuple(e.text(names) for e in param_exprs[p]) for p in param_paths}
    outputs_decl = {out_names[j]: tuple(e.text(names) for e in out_exprs[j]) for j in range(n_out)}
    doc_title = title or _title(ns, model_cls) or f"KernelBench {name}"
    declaration: dict[str, Any] = {
        "NAME": name,
        "TITLE": doc_title,
        "SIZES": {symbol_of[v]: int(ns[v]) for v in used},
        "DTYPES": DTYPES,
        "INPUTS": inputs_decl,
        "OUTPUTS": outputs_decl,
        "SCALARS": tuple(symbol_of[v] for v in used),
        "FLOPS": flops,
        "BYTES": None,
        "CONSTRAINTS": tuple(constraints),
        "RANGE": {},
        "TOLERANCE": None,
        "NAIVE": {},
        "BATCH": symbol_of[batch] if batch is not None else None,
    }

    torch = probe.torch if probe.uses_torch else None
    runner = _Runner(probe, symbols, [input_name[i] for i in tensor_positions], param_paths, fixed, scalar_exprs,
                     n_items, n_out)

    def reference(*arrays: Any, **sizes: int) -> Any:
        """float64 numpy inputs in INPUTS order and the sizes by symbol; float64 numpy outputs."""
        device = reference_device or ("cuda" if torch is not None and torch.cuda.is_available() else "cpu")
        return runner.reference(arrays, sizes, device)

    def torch_reference(*tensors: Any, **sizes: int) -> Any:
        """The model at the tensors' dtype and device; its result as forward returns it."""
        return runner.torch_call(tensors, sizes)

    problem = KernelBenchProblem(
        declaration=declaration, reference=reference, generate=generate,
        torch_reference=torch_reference if torch is not None else None, symbols=symbols, constants=constants,
        parameters={param_name[p]: p for p in param_paths}, fixed_arguments=fixed,
        distributions={k: v[0] for k, v in distributions.items()}, notes=tuple(notes),
        reference_device=reference_device)
    _self_check(problem, size_rounds[0], lambda *a, **s: runner.reference(a, s, "cpu"))
    return problem


def _independent_rows(probe: _Probe, base: _Round, input_exprs: Mapping[int, tuple[Expr, ...]],
                      out_exprs: Sequence[tuple[Expr, ...]], param_exprs: Sequence[tuple[Expr, ...]]) -> str | None:
    """The variable along which the outputs are independent rows (the declaration's BATCH), or None: every output's
    first axis and some inputs' are that one variable (no parameter's is), and changing row 1 of those inputs changes
    row 1 of every output and nothing else."""
    firsts = {exprs[0] for exprs in out_exprs if exprs}
    if len(firsts) != 1 or len(out_exprs) != sum(1 for e in out_exprs if e):
        return None
    first = next(iter(firsts))
    if len(first.symbols) != 1 or first.text() != first.symbols[0] or first(base.values) < 3:  # a bare variable
        return None
    batched = [i for i, exprs in input_exprs.items() if exprs and exprs[0] == first]
    if not batched or any(exprs and exprs[0] == first for exprs in param_exprs):
        return None
    args = list(base.inputs)
    for i in batched:
        changed = args[i].clone() if _is_torch_tensor(args[i]) else np.array(args[i], copy=True)
        changed[1] = changed[1] * 1.5 + 0.25
        args[i] = changed
    try:
        after = _outputs(probe.forward(base.model, args, base.values))
        again = _outputs(probe.forward(base.model, list(base.inputs), base.values))
    except Exception:  # a model that fails on changed values simply has no BATCH
        return None
    for before, now, later in zip(base.outputs, after, again, strict=True):
        a, b, c = _host64(before), _host64(now), _host64(later)
        if a.shape != b.shape or not np.array_equal(a, c, equal_nan=True):
            return None  # a forward that does not repeat itself tells nothing
        moved = np.abs(b - a).reshape(a.shape[0], -1).max(axis=1)
        if not moved[1] > 0 or np.delete(moved, 1).any():
            return None
    return first.symbols[0]


def _probe_inputs(probe: _Probe, candidates: list[str]) -> tuple[list[dict[str, int]], list[list[Any]]]:
    """get_inputs over the probe rounds, with every candidate patched; a candidate whose probe values make
    get_inputs fail (an int used as an axis, say) is left at its module value instead."""
    first_error: KernelBenchError | None = None
    for pool in (0, 1):
        active = list(candidates)
        while True:
            rounds = probe_rounds(active, pool)
            try:
                return rounds, [probe.call_inputs(r, seed=r_i) for r_i, r in enumerate(rounds)]
            except KernelBenchError as exc:
                first_error = first_error or exc
            for drop in active:
                rest = [v for v in active if v != drop]
                try:
                    for r_i, r in enumerate(probe_rounds(rest, pool)):
                        probe.call_inputs(r, seed=r_i)
                except KernelBenchError:
                    continue
                active = rest
                break
            else:
                break
    assert first_error is not None
    raise first_error


def _probe_model(probe: _Probe, used: list[str], input_exprs: Mapping[int, tuple[Expr, ...]],
                 notes: list[str]) -> tuple[list[_Round], dict[str, tuple[str, int]]]:
    """The model built and run over the probe rounds, in the first pool where every round runs, and what that pool
    says about the sizes the model needs: {variable: (">=", n) or ("%", n)} where only a size of at least n, or a
    multiple of n, worked (found by setting each variable alone back to a small prime)."""
    first_error: KernelBenchError | None = None
    for pool in range(len(PROBE_POOLS)):
        rounds = probe_rounds(used, pool)
        elements = max(sum(math.prod(e(r) for e in exprs) for exprs in input_exprs.values()) for r in rounds)
        if elements > MAX_PROBE_ELEMENTS:
            continue
        try:
            model_rounds = [probe.run(r, seed=r_i) for r_i, r in enumerate(rounds)]
        except KernelBenchError as exc:
            first_error = first_error or exc
            continue
        needs: dict[str, tuple[str, int]] = {}
        if pool:
            notes.append(f"the model fails at the smallest probe sizes ({first_error.message if first_error else ''})")
            spread = PROBE_POOLS[pool][0]
            need = (">=", min(spread)) if pool == 1 else ("%", spread[0])
            for v in used:
                if not _runs(probe, {**rounds[0], v: 7}):
                    needs[v] = need
                    if pool == 1:  # the least size that runs, between 8 and 17 (assumed monotonic)
                        low, high = 7, need[1]
                        while high - low > 1:
                            mid = (low + high) // 2
                            low, high = (low, mid) if _runs(probe, {**rounds[0], v: mid}) else (mid, high)
                        needs[v] = (">=", high)
        return model_rounds, needs
    raise first_error or KernelBenchError(
        f"the inputs at every probe size hold more than {MAX_PROBE_ELEMENTS} elements",
        "the model is probed at small sizes; its inputs must be small there")


def _runs(probe: _Probe, values: Mapping[str, int]) -> bool:
    try:
        probe.run(values, seed=0)
    except KernelBenchError:
        return False
    return True


def _forward_names(model_cls: type, count: int) -> list[str]:
    try:
        params = list(inspect.signature(model_cls.forward).parameters.values())[1:]
    except (TypeError, ValueError, AttributeError):
        params = []
    names: list[str] = []
    for p in params:
        if p.kind == p.VAR_POSITIONAL:
            break
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
    names = names[:count]
    taken = set(names)
    for i in range(len(names), count):
        names.append(_unique(f"x{i}", taken, "_"))
    return names


def _title(ns: Mapping[str, Any], model_cls: type) -> str | None:
    """The first sentence of Model's docstring, else of the module's."""
    for doc in (model_cls.__doc__, ns.get("__doc__")):
        if isinstance(doc, str) and doc.strip():
            text = " ".join(doc.strip().split("\n\n")[0].split())
            sentence = re.split(r"(?<=\.)\s", text, maxsplit=1)[0]
            sentence = "".join(c for c in sentence if c.isprintable())
            return sentence if len(sentence) <= 120 else sentence[:119] + "…"
    return None


def _check_model(probe: _Probe, base: _Round, notes: list[str]) -> None:
    """Refuse a forward whose result moves between calls, or that depends on a buffer the ABI cannot pass."""
    again = probe.forward(copy.deepcopy(base.model), base.inputs, base.values, seed=1)
    if not all(_same(a, b) for a, b in zip(base.outputs, _outputs(again), strict=True)):
        raise KernelBenchError("forward gives different results on the same inputs (random: dropout in training "
                               "mode?)", "a reference must be deterministic")
    if not probe.is_module:
        return
    torch = probe.torch
    buffers = [(n, b) for n, b in base.model.named_buffers() if b.is_floating_point()]
    if not buffers:
        return
    with probe.seeded(7):
        changed = {n: torch.rand_like(b) + 0.5 for n, b in buffers}
    moved = probe.forward(copy.deepcopy(base.model), base.inputs, base.values, overrides=changed)
    if not all(_same(a, b) for a, b in zip(base.outputs, _outputs(moved), strict=True)):
        raise KernelBenchError(f"the model's output depends on its buffers ({', '.join(n for n, _ in buffers)}), "
                               "which cannot be passed to a kernel", "parameters become inputs; buffers cannot")
    notes.append(f"buffers {', '.join(n for n, _ in buffers)} do not change the output and are left out")


def _fit_flops(counts: Sequence[int | None], rounds: Sequence[Mapping[str, int]],
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


class _Runner:
    """Builds the model at given sizes (cached) and calls it with inputs in ABI order."""

    def __init__(self, probe: _Probe, symbols: Mapping[str, str], input_names: list[str], param_paths: list[str],
                 fixed: Mapping[int, Any], scalar_exprs: Mapping[int, Expr], n_items: int, n_out: int) -> None:
        self.probe = probe
        self.symbols = dict(symbols)
        self.input_names = input_names
        self.param_paths = param_paths
        self.fixed = dict(fixed)
        self.scalar_exprs = dict(scalar_exprs)
        self.n_items = n_items
        self.n_out = n_out
        self.models: dict[tuple[Any, ...], Any] = {}

    def values(self, sizes: Mapping[str, int]) -> dict[str, int]:
        missing = sorted(set(self.symbols) - set(sizes))
        extra = sorted(set(sizes) - set(self.symbols))
        if missing or extra:
            raise KernelBenchError(f"sizes must name exactly {sorted(self.symbols)} (missing {missing}, "
                                   f"unknown {extra})")
        return {var: int(sizes[sym]) for sym, var in self.symbols.items()}

    def model(self, values: Mapping[str, int], key: tuple[Any, ...], convert: Callable[[Any], Any]) -> Any:
        full = (tuple(sorted(values.items())), *key)
        if full not in self.models:
            if len(self.models) >= 4:
                self.models.pop(next(iter(self.models)))
            self.models[full] = convert(self.probe.build(values, seed=0))
        return self.models[full]

    def split(self, items: Sequence[Any], values: Mapping[str, int]) -> tuple[list[Any], list[Any]]:
        n = len(self.input_names)
        if len(items) != n + len(self.param_paths):
            raise KernelBenchError(f"expected {n + len(self.param_paths)} inputs "
                                   f"({', '.join(self.input_names)}{', ' if self.param_paths else ''}"
                                   f"{', '.join(self.param_paths)}), got {len(items)}")
        tensors = iter(items[:n])
        args = []
        for i in range(self.n_items):
            if i in self.fixed:
                args.append(self.fixed[i])
            elif i in self.scalar_exprs:
                args.append(self.scalar_exprs[i](values))
            else:
                args.append(next(tensors))
        return args, list(items[n:])

    def reference(self, arrays: Sequence[Any], sizes: Mapping[str, int], device: str) -> Any:
        values = self.values(sizes)
        probe = self.probe
        if not probe.uses_torch:
            model = self.model(values, ("numpy",), lambda m: m)
            args, _ = self.split([np.array(a, dtype=np.float64) for a in arrays], values)
            outs = [np.asarray(o, dtype=np.float64) for o in _outputs(probe.forward(model, args, values))]
        else:
            torch = probe.torch
            model = self.model(values, ("float64", device), lambda m: probe.converted(m, device, torch.float64))
            tensors = [torch.tensor(np.asarray(a, dtype=np.float64), device=device) for a in arrays]
            args, params = self.split(tensors, values)
            overrides = dict(zip(self.param_paths, params, strict=True))
            outs = [_host64(o) for o in _outputs(probe.forward(model, args, values, overrides or None))]
        if len(outs) != self.n_out:
            raise KernelBenchError(f"forward returned {len(outs)} outputs, {self.n_out} declared")
        return outs[0] if self.n_out == 1 else tuple(outs)

    def torch_call(self, tensors: Sequence[Any], sizes: Mapping[str, int]) -> Any:
        torch = self.probe.torch
        values = self.values(sizes)
        first = next(t for t in tensors if isinstance(t, torch.Tensor))
        model = self.model(values, (str(first.dtype), str(first.device)),
                           lambda m: self.probe.converted(m, first.device, first.dtype))
        args, params = self.split(list(tensors), values)
        with patched(self.probe.ns, values), torch.no_grad():
            if params:
                return torch.func.functional_call(model, dict(zip(self.param_paths, params, strict=True)),
                                                  tuple(args))
            return (model if callable(model) else model.forward)(*args)


def _self_check(problem: KernelBenchProblem, sizes: Mapping[str, int], reference: Callable[..., Any]) -> None:
    """The reference (on the CPU: the describe process needs no GPU) on generated inputs at probe sizes: finite,
    and of the declared shapes."""
    decl = problem.declaration
    rng = np.random.default_rng(0)
    values = {s: int(sizes[s]) for s in decl["SCALARS"]}
    env = dict(values)

    def shape_of(exprs: Sequence[str]) -> tuple[int, ...]:
        return tuple(_evaluate(e, env) for e in exprs)

    arrays = [problem.generate(n, shape_of(s), rng) for n, s in decl["INPUTS"].items()]
    result = reference(*arrays, **values)
    outs = result if isinstance(result, tuple) else (result,)
    for (out_name, exprs), out in zip(decl["OUTPUTS"].items(), outs, strict=True):
        if tuple(out.shape) != shape_of(exprs):
            raise KernelBenchError(f"output {out_name} has shape {tuple(out.shape)} at {_sizes_text(values)} in "
                                   f"float64, declared {shape_of(exprs)}")
        if not np.all(np.isfinite(out)):
            kinds = ", ".join(f"{k}: {v}" for k, v in problem.distributions.items())
            raise KernelBenchError(f"the float64 reference gives NaN or Inf in output {out_name} at "
                                   f"{_sizes_text(values)} on inputs drawn like get_inputs' ({kinds})",
                                   "the reference must be finite on random inputs")


def _evaluate(text: str, env: Mapping[str, int]) -> int:
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
