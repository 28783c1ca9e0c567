"""The probe: `get_inputs` and the model run over rounds of patched sizes, which sizes each input and output follows,
where a model needs larger or divisible sizes (constraints), and how its inputs were drawn."""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from peak_mcp.problems.kernelbench import modes
from peak_mcp.problems.kernelbench.fitting import Expr, probe_rounds, sizes_text
from peak_mcp.problems.kernelbench.rules import DIVISIBLE_POOLS, MAX_PROBE_ELEMENTS, PROBE_POOLS, KernelBenchError
from peak_mcp.problems.kernelbench.tracing import (
    host64,
    is_array,
    is_torch_tensor,
    outputs_of,
    patched,
    same,
    torch_module,
)
from peak_mcp.problems.traits import OpRecorder


@dataclass
class Round:
    values: dict[str, int]
    inputs: list[Any]
    model: Any = None
    outputs: list[Any] = field(default_factory=list)
    params: list[tuple[str, Any]] = field(default_factory=list)
    flops: int | None = None
    ops: tuple[str, ...] = ()  # the aten ops forward ran, in order: the problem's traits (problems/traits.py)
    buffers: dict[str, Any] = field(default_factory=dict)  # the model's floating-point buffers


def short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


class Probe:
    def __init__(self, namespace: dict[str, Any], model_cls: Any, get_inputs: Callable[[], Any],
                 get_init_inputs: Callable[[], Any]) -> None:
        self.ns = namespace
        self.model_cls = model_cls
        self.get_inputs = get_inputs
        self.get_init_inputs = get_init_inputs
        self.torch = torch_module()
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

    def shapes_of_inputs(self, values: Mapping[str, int], seed: int) -> list[Any]:
        """get_inputs' items with torch's tensors made on the meta device (shapes and types, no memory: a probe
        size of a 5-D input can hold gigabytes); made for real where get_inputs needs their values."""
        if self.torch is not None:
            try:
                with self.torch.device("meta"):
                    return self.call_inputs(values, seed)
            except KernelBenchError:
                pass
        return self.call_inputs(values, seed)

    def call_inputs(self, values: Mapping[str, int], seed: int) -> list[Any]:
        with patched(self.ns, values), self.seeded(seed):
            try:
                got = self.get_inputs()
            except Exception as exc:
                raise KernelBenchError(f"get_inputs() raised {short(exc)} (with {sizes_text(values)})",
                                       "get_inputs must run at sizes other than the module's") from exc
        if is_array(got):
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
                raise KernelBenchError(f"get_init_inputs() raised {short(exc)} (with {sizes_text(values)})") from exc
            try:
                model = self.model_cls(*init)
            except Exception as exc:
                raise KernelBenchError(f"Model(*get_init_inputs()) raised {short(exc)} "
                                       f"(with {sizes_text(values)})") from exc
        return modes.prepare(self.torch, model) if self.is_module else model

    def forward(self, model: Any, args: Sequence[Any], values: Mapping[str, int],
                overrides: Mapping[str, Any] | None = None, seed: int = 0) -> Any:
        """The model on `args` (copies: forward may work in place), variables patched, random generators seeded
        (`check_model` runs it under two seeds to find a random forward), without autograd."""
        args = [a.clone() if is_torch_tensor(a) else a.copy() if isinstance(a, np.ndarray) else a for a in args]
        with patched(self.ns, values), self.seeded(seed):
            if not self.uses_torch:
                return (model if callable(model) else model.forward)(*args)
            dtype = modes.first_float_dtype(self.torch, args)
            with self.torch.no_grad(), modes.default_dtype(self.torch, dtype) if dtype else contextlib.nullcontext():
                if overrides:
                    return self.torch.func.functional_call(model, dict(overrides), tuple(args))
                return (model if callable(model) else model.forward)(*args)

    def converted(self, model: Any, device: Any, dtype: Any) -> Any:
        """An nn.Module moved to `device` and `dtype` (its floating parameters and buffers); anything else as is."""
        return model.to(device=device, dtype=dtype) if self.is_module else model

    def run(self, values: Mapping[str, int], seed: int, keep: bool = True) -> Round:
        """One round. Not `keep`: the model and its parameters' memory go once it has run (their shapes stay, as
        meta tensors): a network of gigabytes is probed with one copy alive, not one per round."""
        inputs = self.call_inputs(values, seed)
        model = self.build(values, seed)
        try:
            counter = None
            if self.uses_torch:
                from torch.utils.flop_counter import FlopCounterMode

                counter = FlopCounterMode(display=False)
            recorder = OpRecorder()
            with counter if counter is not None else contextlib.nullcontext(), \
                    recorder if counter is not None else contextlib.nullcontext():
                result = self.forward(model, inputs, values)
        except KernelBenchError:
            raise
        except Exception as exc:
            raise KernelBenchError(f"forward raised {short(exc)} (with {sizes_text(values)})",
                                   "the model must run at sizes other than the module's") from exc
        params = list(model.named_parameters()) if self.is_module else []
        buffers = {n: b for n, b in model.named_buffers() if b.is_floating_point()} if self.is_module else {}
        if not keep and self.is_module:
            params = [(n, p.detach().to("meta")) for n, p in params]
            model = None
        return Round(dict(values), inputs, model, outputs_of(result), params,
                      counter.get_total_flops() if counter is not None else None, tuple(recorder.ops), buffers)


def distribution(values: np.ndarray) -> tuple[str, float]:
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


def draw(kind: str, constant: float, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
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


def independent_rows(probe: Probe, base: Round, input_exprs: Mapping[int, tuple[Expr, ...]],
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
        changed = args[i].clone() if is_torch_tensor(args[i]) else np.array(args[i], copy=True)
        changed[1] = changed[1] * 1.5 + 0.25
        args[i] = changed
    try:
        after = outputs_of(probe.forward(base.model, args, base.values))
        again = outputs_of(probe.forward(base.model, list(base.inputs), base.values))
    except Exception:  # a model that fails on changed values simply has no BATCH
        return None
    for before, now, later in zip(base.outputs, after, again, strict=True):
        a, b, c = host64(before), host64(now), host64(later)
        if a.shape != b.shape or not np.array_equal(a, c, equal_nan=True):
            return None  # a forward that does not repeat itself tells nothing
        moved = np.abs(b - a).reshape(a.shape[0], -1).max(axis=1)
        if not moved[1] > 0 or np.delete(moved, 1).any():
            return None
    return first.symbols[0]


def probe_inputs(probe: Probe, candidates: list[str]) -> tuple[list[dict[str, int]], list[list[Any]]]:
    """get_inputs over the probe rounds, with every candidate patched; a candidate whose probe values make
    get_inputs fail (an int used as an axis, say) is left at its module value instead."""
    first_error: KernelBenchError | None = None
    for pool in (0, 1):
        active = list(candidates)
        while True:
            rounds = probe_rounds(active, pool)
            try:
                return rounds, [probe.shapes_of_inputs(r, seed=r_i) for r_i, r in enumerate(rounds)]
            except KernelBenchError as exc:
                first_error = first_error or exc
            for drop in active:
                rest = [v for v in active if v != drop]
                try:
                    for r_i, r in enumerate(probe_rounds(rest, pool)):
                        probe.shapes_of_inputs(r, seed=r_i)
                except KernelBenchError:
                    continue
                active = rest
                break
            else:
                break
    assert first_error is not None
    raise first_error


def probe_model(probe: Probe, used: list[str], input_exprs: Mapping[int, tuple[Expr, ...]],
                 notes: list[str]) -> tuple[list[Round], dict[str, tuple[str, int]]]:
    """The model built and run over the probe rounds, in the first pool where every round runs, and what that pool
    says about the sizes the model needs: {variable: (">=", n) or ("%", n)} where only a size of at least n, or a
    multiple of n, worked (found by setting each variable alone back to a small prime)."""
    first_error: KernelBenchError | None = None
    for pool in range(len(PROBE_POOLS) if used else 1):  # no variable: one round, at the file's sizes
        rounds = probe_rounds(used, pool) if used else [{}]
        elements = max(sum(math.prod(e(r) for e in exprs) for exprs in input_exprs.values()) for r in rounds)
        if elements > MAX_PROBE_ELEMENTS:
            continue
        try:
            model_rounds = [probe.run(r, seed=r_i, keep=r_i == 0) for r_i, r in enumerate(rounds)]
        except KernelBenchError as exc:
            first_error = first_error or exc
            continue
        if pool and first_error:
            notes.append(f"the model fails at the smallest probe sizes ({first_error.message})")
        elif pool:
            notes.append(f"probed at sizes from {min(PROBE_POOLS[pool][0])}: larger ones make inputs of more than "
                         f"{MAX_PROBE_ELEMENTS} elements")
        needs: dict[str, tuple[str, int]] = {}
        if pool in DIVISIBLE_POOLS:  # multiples: a variable that fails alone at 7 needs them (GroupNorm's channels)
            needs = {v: ("%", PROBE_POOLS[pool][0][0]) for v in used if not runs(probe, {**rounds[0], v: 7})}
        needs |= least_sizes(probe, [v for v in used if v not in needs], rounds[0])
        return model_rounds, needs
    raise first_error or KernelBenchError(
        f"the inputs at every probe size hold more than {MAX_PROBE_ELEMENTS} elements",
        "the model is probed at small sizes; its inputs must be small there")


def least_sizes(probe: Probe, used: list[str], base: Mapping[str, int]) -> dict[str, tuple[str, int]]:
    """{variable: (">=", n)} for each variable the model fails below n at (a pooling window, a filter larger than
    the input; bisection up to its value in `base`, a round that ran), alone and then all together at their least
    values, so that the smoke test and generality's small sizes stay where the model runs."""
    floor = min(PROBE_POOLS[0][0])
    least = {}
    for v in used:
        if runs(probe, {**base, v: 1}):
            least[v] = 1
            continue
        low, high = 1, base[v]  # fails at low, runs at high (a round ran there); assumed monotonic
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (low, mid) if runs(probe, {**base, v: mid}) else (mid, high)
        least[v] = high
    for n in range(1, floor + 1):  # together: H >= 3 and W >= 3 may still fail at H = W = 3 (a 3x3 window, dilated)
        if runs(probe, {**base, **{v: max(least[v], n) for v in used}}):
            least = {v: max(least[v], n) for v in used}
            break
    return {v: (">=", n) for v, n in least.items() if n > 1}


def runs(probe: Probe, values: Mapping[str, int]) -> bool:
    try:
        probe.run(values, seed=0)
    except KernelBenchError:
        return False
    return True


class NotDeterministic(KernelBenchError):
    """A forward that differs between calls: no other sizes help."""


def model_buffers(probe: Probe, rounds: list[Round], notes: list[str]) -> list[str]:
    """check_model's buffers that change the output, each the same (shape and values) in every round: a buffer
    input holds the model's own values, which must not depend on the sizes (else KernelBenchError)."""
    used = check_model(probe, rounds[0], notes)
    for name in used:
        first = host64(rounds[0].buffers[name])
        for r in rounds[1:]:
            other = host64(r.buffers[name])
            if other.shape != first.shape or not np.array_equal(other, first):
                raise KernelBenchError(f"the model's buffer {name}, which changes the output, changes with the sizes")
    return used


def check_model(probe: Probe, base: Round, notes: list[str]) -> list[str]:
    """Refuse a forward whose result moves between calls under the same seeds; note one that draws random numbers
    (the same on every call: generators are seeded per call). Returns the floating-point buffers the output
    depends on (a causal mask): they become inputs, named in the ABI; the others are left out."""
    again = probe.forward(copy.deepcopy(base.model), base.inputs, base.values, seed=0)
    if not all(same(a, b) for a, b in zip(base.outputs, outputs_of(again), strict=True)):
        raise NotDeterministic("forward gives different results on the same inputs with torch's and numpy's "
                               "generators seeded alike (it draws from another source, or keeps state between "
                               "calls)", "a reference must be deterministic")
    other = probe.forward(copy.deepcopy(base.model), base.inputs, base.values, seed=1)
    moved = [rel_l2(host64(a), host64(b)) for a, b in zip(base.outputs, outputs_of(other), strict=True)]
    if max(moved, default=0.0) > 0:
        notes.append(f"forward draws random numbers (a torch.randn in forward): the reference seeds torch's "
                     f"generator with 0 before each call, so they are the same on every call; a kernel cannot draw "
                     f"them, and the output moves by a relative L2 of {max(moved):.1g} between seeds 0 and 1 at "
                     f"{sizes_text(base.values)}")
    if not probe.is_module:
        return []
    torch = probe.torch
    buffers = [(n, b) for n, b in base.model.named_buffers() if b.is_floating_point()]
    def moves(names: list[str]) -> bool:
        with probe.seeded(7):
            changed = {n: torch.rand_like(b) + 0.5 for n, b in buffers if n in names}
        out = probe.forward(copy.deepcopy(base.model), base.inputs, base.values, overrides=changed)
        return not all(same(a, b) for a, b in zip(base.outputs, outputs_of(out), strict=True))

    # all at once first: a network's hundreds of batch-norm statistics cost one forward, not hundreds
    everything = [n for n, _ in buffers]
    used = ([n for n in everything if moves([n])] if len(everything) > 1 else everything) \
        if everything and moves(everything) else []
    left = [n for n, _ in buffers if n not in used]
    if left:
        notes.append(f"buffers {', '.join(left[:8])}{', ...' if len(left) > 8 else ''} do not change the output "
                     "and are left out")
    return used


def rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    scale = float(np.linalg.norm(a.ravel()))
    return float(np.linalg.norm((a - b).ravel())) / scale if scale else float(np.abs(b).max(initial=0.0))
