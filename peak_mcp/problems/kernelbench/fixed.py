"""The model's shapes over the probe rounds, and the fixed-size fallback: a model that cannot run at the probe's
varied sizes (a fixed image size, channel counts that must divide groups, shapes tied in a loss) or whose parameters
change with them (an LSTM's layers, a position embedding) is probed as KernelBench runs it, at the file's own sizes,
with only the variables that still vary on their own (most often the batch) left as size symbols."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from peak_mcp.problems.kernelbench.fitting import Expr, fit_shapes, latin_rounds, probe_rounds
from peak_mcp.problems.kernelbench.probing import NotDeterministic, Probe, Round, least_sizes
from peak_mcp.problems.kernelbench.rules import MAX_PROBE_ELEMENTS, PROBE_ROUNDS, KernelBenchError

# One variable's rounds in the fallback, the others at the file's values: small (the rest may be a full image).
FIXED_VALUES = (3, 5, 2, 4, 7)
# Several variables together: latin rounds over these (7 entries: the least width of a mixed round).
FIXED_POOL = (3, 5, 2, 4, 7, 6, 8, 9, 10, 11, 12, 13)


@dataclass
class ModelShapes:
    param_paths: list[str]
    param_exprs: dict[str, tuple[Expr, ...]]
    out_exprs: list[tuple[Expr, ...]]


def model_shapes(rounds: list[Round]) -> ModelShapes:
    """Parameters and outputs fitted over the rounds; KernelBenchError where they change shape in a way no
    expression of the varied sizes explains, or change in number."""
    base = rounds[0]
    var_rounds = [r.values for r in rounds]
    paths = [p for p, _ in base.params]
    if any([p for p, _ in r.params] != paths for r in rounds):
        raise KernelBenchError("the model's parameters change with the sizes")
    param_exprs = {}
    for k, (path, tensor) in enumerate(base.params):
        if not tensor.is_floating_point():
            raise KernelBenchError(f"parameter {path} of the model is not floating point")
        param_exprs[path] = fit_shapes(f"parameter {path}", [tuple(r.params[k][1].shape) for r in rounds],
                                       var_rounds)
    n_out = len(base.outputs)
    if any(len(r.outputs) != n_out for r in rounds):
        raise KernelBenchError("forward returns a different number of outputs at different sizes")
    out_exprs = [fit_shapes(f"output {'out' if n_out == 1 else f'out{j}'}",
                            [tuple(r.outputs[j].shape) for r in rounds], var_rounds) for j in range(n_out)]
    return ModelShapes(paths, param_exprs, out_exprs)


def _elements(probe: Probe, values: dict[str, int]) -> int:
    """The elements of get_inputs' tensors at `values` (made on the meta device: nothing allocated)."""
    try:
        items = probe.shapes_of_inputs(values, 0)
    except KernelBenchError:
        return 0  # it fails: the round says so when it runs
    return sum(math.prod(x.shape) for x in items if hasattr(x, "shape"))


@dataclass
class Fallback:
    kept: list[str]  # the variables that still vary: the size symbols
    rounds: list[Round]
    shapes: ModelShapes
    needs: dict[str, tuple[str, int]]
    note: str
    buffers: list[str]  # the buffers that change the output (check's answer)


def fixed_sizes(probe: Probe, used: list[str], reason: KernelBenchError,
                check: Callable[[list[Round]], list[str]]) -> Fallback:
    """The model with some variables of `used` at the file's own values: first each one alone fixed (the others
    at the probe's spread sizes); else each varied alone (FIXED_VALUES, the others at the file's values) and kept
    as a symbol where the model runs and its shapes fit, then the kept ones together; else none. KernelBenchError
    where the model does not run even at the file's sizes. `check` (the buffers that change the output, each the
    same in every round, else KernelBenchError) must hold for a choice to be taken."""
    def fallback(group: list[str], values: list[dict[str, int]], rounds: list[Round], shapes: ModelShapes) -> Fallback:
        buffers = check(rounds)
        fixed = [v for v in used if v not in group]
        why = " ".join(reason.message.split())[:240]
        note = (f"Fixed sizes: at other values of {', '.join(fixed)} the model does not run or changes its "
                f"parameters ({why}); {'they stay' if len(fixed) > 1 else 'it stays'} at the file's "
                f"value{'s' if len(fixed) > 1 else ''}, as KernelBench runs it"
                + (f"; only {', '.join(group)} {'varies' if len(group) == 1 else 'vary'}." if group else
                   ": the problem has no size symbols."))
        return Fallback(group, rounds, shapes, least_sizes(probe, group, values[0]) if group else {}, note, buffers)

    # First one variable fixed, the others varied at the probe's small sizes (cheap: a depthwise convolution's
    # channels, a network's image size)
    for v in used if len(used) > 1 else []:
        group = [u for u in used if u != v]
        # the first pool's spread values, else the small pool's: the inputs must stay small (a 5-D input)
        values = next((vals for vals in (probe_rounds(group, 0)[:PROBE_ROUNDS], probe_rounds(group, -1))
                       if max(_elements(probe, r) for r in vals) <= MAX_PROBE_ELEMENTS), None)
        if values is None:
            continue
        try:
            rounds = []
            for i, r in enumerate(values):  # a change of parameters shows at the second round: stop there
                rounds.append(probe.run(r, seed=i, keep=not i))
                model_shapes(rounds[:1] + rounds[-1:])
            return fallback(group, values, rounds, model_shapes(rounds))
        except NotDeterministic:
            raise
        except KernelBenchError:
            continue
    # then each variable varied alone, the others at the file's values
    kept = []
    for v in used:
        try:
            model_shapes([probe.run({v: x}, seed=i, keep=False) for i, x in enumerate(FIXED_VALUES)])
        except KernelBenchError:
            continue
        kept.append(v)
    tries = [kept, []] if kept else [[]]
    error: KernelBenchError | None = None
    for group in tries:
        values = ([{group[0]: x} for x in FIXED_VALUES] if len(group) == 1 else
                  latin_rounds(group, FIXED_POOL) if group else [{}])
        try:
            rounds = [probe.run(r, seed=i, keep=not i) for i, r in enumerate(values)]
            return fallback(group, values, rounds, model_shapes(rounds))
        except NotDeterministic:
            raise
        except KernelBenchError as exc:
            error = error or exc
            continue
    assert error is not None
    raise KernelBenchError(f"{reason.message}; at the file's own sizes too: {error.message}",
                           error.hint or reason.hint) from reason
