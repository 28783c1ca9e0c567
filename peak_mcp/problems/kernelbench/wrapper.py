"""The model wrapper: `reference` and `torch_reference` as a problem file defines them, building the module's model
at the sizes asked for (cached), and the check of the reference on generated inputs before the translation is
returned."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from peak_mcp.core.dtypes import EXACT_DTYPES
from peak_mcp.problems.kernelbench import modes
from peak_mcp.problems.kernelbench.exact import draw_exact, torch_dtype
from peak_mcp.problems.kernelbench.fitting import Expr, evaluate_expression
from peak_mcp.problems.kernelbench.probing import Probe, sizes_text
from peak_mcp.problems.kernelbench.problem import KernelBenchProblem
from peak_mcp.problems.kernelbench.rules import KernelBenchError
from peak_mcp.problems.kernelbench.tracing import host64, outputs_of, patched

MAX_CACHED_BYTES = 1 << 30  # models kept between calls; past it only the one in use (an MLP of gigabytes)


def _bytes(models: Any) -> int:
    return sum(p.numel() * p.element_size() for m in models if hasattr(m, "parameters") for p in m.parameters())


class Runner:
    """Builds the model at given sizes (cached) and calls it with inputs in ABI order."""

    def __init__(self, probe: Probe, symbols: Mapping[str, str], input_names: list[str], param_paths: list[str],
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
        self.exact: dict[int, str] = {}  # position among the inputs -> storage type (kernelbench/exact.py)

    def typed(self, tensors: list[Any]) -> list[Any]:
        """Integer and bool inputs back in their own torch types (they arrive as float64, or as stored bytes)."""
        torch = self.probe.torch
        return [t.to(torch_dtype(torch, self.exact[k])) if k in self.exact else t for k, t in enumerate(tensors)]

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
            if len(self.models) >= 4 or _bytes(self.models.values()) > MAX_CACHED_BYTES:
                self.models.clear() if len(self.models) < 4 else self.models.pop(next(iter(self.models)))
            torch = self.probe.torch
            # the float64 reference's model made in float64 (no float32 copy first: a model of gigabytes)
            with modes.default_dtype(torch, torch.float64) if key[0] == "float64" and self.probe.is_module \
                    else contextlib.nullcontext():
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
            outs = [np.asarray(o, dtype=np.float64) for o in outputs_of(probe.forward(model, args, values))]
        else:
            torch = probe.torch
            model = self.model(values, ("float64", device), lambda m: probe.converted(m, device, torch.float64))
            # no host copy: float32 crosses to the device as it is and widens there; forward copies what it is given
            tensors = self.typed([torch.from_numpy(np.ascontiguousarray(a)).to(device=device, dtype=torch.float64)
                                  for a in arrays])
            args, params = self.split(tensors, values)
            overrides = dict(zip(self.param_paths, params, strict=True))
            outs = [host64(o) for o in outputs_of(probe.forward(model, args, values, overrides or None))]
        if len(outs) != self.n_out:
            raise KernelBenchError(f"forward returned {len(outs)} outputs, {self.n_out} declared")
        return outs[0] if self.n_out == 1 else tuple(outs)

    def torch_call(self, tensors: Sequence[Any], sizes: Mapping[str, int]) -> Any:
        torch = self.probe.torch
        values = self.values(sizes)
        tensors = self.typed(list(tensors))
        first = next(t for t in tensors if isinstance(t, torch.Tensor) and t.is_floating_point())
        model = self.model(values, (str(first.dtype), str(first.device)),
                           lambda m: self.probe.converted(m, first.device, first.dtype))
        args, params = self.split(list(tensors), values)
        # seeded like `reference`: a forward that draws random numbers draws the same ones on every call
        with patched(self.probe.ns, values), torch.no_grad(), self.probe.seeded(0), \
                modes.default_dtype(torch, first.dtype):
            if params:
                return torch.func.functional_call(model, dict(zip(self.param_paths, params, strict=True)),
                                                  tuple(args))
            return (model if callable(model) else model.forward)(*args)


def declared_inputs(declaration: Mapping[str, Any],
                    generate: Callable[[str, tuple[int, ...], np.random.Generator], np.ndarray],
                    values: Mapping[str, int], rng: np.random.Generator,
                    signed: Mapping[str, tuple[float, float]] | None = None) -> list[np.ndarray]:
    """Host inputs in INPUTS order at `values` (the size symbols): integer and bool ones in their declared range,
    those in `signed` uniform in their (low, high), the rest as `generate` draws them."""
    env = dict(values)

    def shape_of(exprs: Sequence[str]) -> tuple[int, ...]:
        return tuple(evaluate_expression(e, env) for e in exprs)

    arrays = []
    for name, spec in declaration["INPUTS"].items():  # a shape, or (storage type, shape[, (low, high)])
        if spec and spec[0] in EXACT_DTYPES:
            bounds = tuple(evaluate_expression(e, env) for e in spec[2]) if len(spec) > 2 else None
            arrays.append(draw_exact(spec[0], bounds, shape_of(spec[1]), rng))
        elif signed and name in signed:
            arrays.append(rng.uniform(*signed[name], shape_of(spec)))
        else:
            arrays.append(generate(name, shape_of(spec), rng))
    return arrays


def self_check(problem: KernelBenchProblem, sizes: Mapping[str, int], reference: Callable[..., Any]) -> None:
    """The reference (on the CPU: the describe process needs no GPU) on generated inputs at probe sizes: finite,
    and of the declared shapes."""
    decl = problem.declaration
    values = {s: int(sizes[s]) for s in decl["SCALARS"]}

    def shape_of(exprs: Sequence[str]) -> tuple[int, ...]:
        return tuple(evaluate_expression(e, values) for e in exprs)

    arrays = declared_inputs(decl, problem.generate, values, np.random.default_rng(0))
    result = reference(*arrays, **values)
    outs = result if isinstance(result, tuple) else (result,)
    for (out_name, exprs), out in zip(decl["OUTPUTS"].items(), outs, strict=True):
        exprs = exprs[1] if exprs and exprs[0] in EXACT_DTYPES else exprs
        if tuple(out.shape) != shape_of(exprs):
            raise KernelBenchError(f"output {out_name} has shape {tuple(out.shape)} at {sizes_text(values)} in "
                                   f"float64, declared {shape_of(exprs)}")
        if not np.all(np.isfinite(out)):
            kinds = ", ".join(f"{k}: {v}" for k, v in problem.distributions.items())
            raise KernelBenchError(f"the float64 reference gives NaN or Inf in output {out_name} at "
                                   f"{sizes_text(values)} on inputs drawn like get_inputs' ({kinds})",
                                   "the reference must be finite on random inputs")
