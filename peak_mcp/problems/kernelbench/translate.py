"""`declare_kernelbench`: an imported KernelBench module translated into a `KernelBenchProblem` (the declaration as
data plus `reference`, `generate` and `torch_reference`), with the name a file gets and the test that tells a
KernelBench module from a problem file."""

from __future__ import annotations

import functools
import inspect
import math
import re
import types
from collections.abc import Mapping
from typing import Any

import numpy as np

from peak_mcp.core.expressions import evaluate_condition
from peak_mcp.problems.declaration import MAX_ELEMENTS, MAX_NAME_CHARS
from peak_mcp.problems.declaration import NAME as NAME_PATTERN
from peak_mcp.problems.kernelbench import modes
from peak_mcp.problems.kernelbench.definition import definition
from peak_mcp.problems.kernelbench.exact import exact_dtype, int_range
from peak_mcp.problems.kernelbench.fitting import Expr, fit_dimension, fit_flops, fit_shapes, sizes_text
from peak_mcp.problems.kernelbench.fixed import fixed_sizes, model_shapes
from peak_mcp.problems.kernelbench.probing import (
    NotDeterministic,
    Probe,
    distribution,
    draw,
    independent_rows,
    model_buffers,
    probe_inputs,
    probe_model,
)
from peak_mcp.problems.kernelbench.problem import KernelBenchProblem
from peak_mcp.problems.kernelbench.rules import DTYPES, MAX_CANDIDATES, KernelBenchError
from peak_mcp.problems.kernelbench.stress import signed_stress, stress_line
from peak_mcp.problems.kernelbench.tracing import (
    host64,
    int_variables,
    is_array,
    is_torch_tensor,
    referenced_names,
)
from peak_mcp.problems.kernelbench.wrapper import Runner, self_check
from peak_mcp.problems.traits import traits_of_ops


def _identifier(text: str) -> str:
    out = re.sub(r"\W", "_", text)
    return out if out and not out[0].isdigit() else f"x_{out}"


def _within_elements(values: dict[str, int], shapes: list[tuple[Expr, ...]], constraints: list[str],
                     symbol_of: Mapping[str, str]) -> dict[str, int]:
    """The file's sizes, the largest halved in turn while a buffer holds more than MAX_ELEMENTS (a 2048 x 2048
    image of 64 channels, 16 deep) and the constraints still hold."""
    values = dict(values)

    def too_big(vals: Mapping[str, int]) -> bool:
        return any(math.prod(e(vals) for e in exprs) > MAX_ELEMENTS for exprs in shapes)

    while values and too_big(values):
        v = max(values, key=lambda k: values[k])
        smaller = {**values, v: max(1, values[v] // 2)}
        env = {symbol_of[k]: n for k, n in smaller.items()}
        if smaller == values or not all(evaluate_condition(c, env) for c in constraints):
            break
        values = smaller
    return values


def _short_name(path: str, k: int) -> str:
    """A parameter's ABI name: its path with dots as underscores; past 28 characters (identifiers hold 32, _unique
    may add to it), `p<k>_` and the path's tail (`p17_self_attn_in_proj_weight`)."""
    name = _identifier(path.replace(".", "_"))
    if len(name) <= 28:
        return name
    head = f"p{k}_"
    return head + name[-(28 - len(head)):].lstrip("_")


def _unique(name: str, taken: set[str], suffix: str) -> str:
    while name in taken:
        name += suffix
    taken.add(name)
    return name


def kernelbench_name(stem: str) -> str:
    """A problem name (declaration.NAME) from a KernelBench file's stem: `19_ReLU` -> `kb_19_relu`. Never cut: an
    agent passes the name back to start_session, and a cut one could name two files; a stem too long to fit is a
    KernelBenchError that says so."""
    name = re.sub(r"_+", "_", re.sub(r"[^a-z0-9]", "_", stem.lower())).strip("_") or "problem"
    if not name[0].isalpha():
        name = f"kb_{name}"
    if len(name) > MAX_NAME_CHARS:
        raise KernelBenchError(f"the file name gives the problem name {name!r}, {len(name)} characters: over "
                               f"{MAX_NAME_CHARS}", "rename the file (its stem names the problem)")
    return name


def looks_like_kernelbench(namespace: Mapping[str, Any]) -> bool:
    """A module namespace in KernelBench form: a class `Model` and a function `get_inputs`, and no declaration of
    its own (`NAME`)."""
    return isinstance(namespace.get("Model"), type) and callable(namespace.get("get_inputs")) \
        and "NAME" not in namespace


def declare_kernelbench(module: types.ModuleType | dict[str, Any], name: str, *, title: str | None = None,
                        reference_device: str | None = None) -> KernelBenchProblem:
    """Translate an imported KernelBench module (or its globals dict) into a `KernelBenchProblem` named `name`.
    Raises KernelBenchError, naming what and where, for a file that cannot be translated. See the module docstring
    for the rules."""
    if not NAME_PATTERN.fullmatch(name):
        raise KernelBenchError(f"problem name {name!r} does not match {NAME_PATTERN.pattern}",
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
    probe = Probe(ns, model_cls, get_inputs, get_init_inputs)

    # 1. Size symbols: the ints get_inputs reads whose values shape its tensors.
    candidates = int_variables(ns, referenced_names([get_inputs], ns))
    if len(candidates) > MAX_CANDIDATES:
        raise KernelBenchError(f"get_inputs reads {len(candidates)} int variables ({', '.join(candidates)}); at most "
                               f"{MAX_CANDIDATES} can be probed")
    rounds, observed = probe_inputs(probe, candidates)
    first = observed[0]
    n_items = len(first)
    if any(len(items) != n_items for items in observed):
        raise KernelBenchError("get_inputs returns a different number of inputs at different sizes")
    arg_names = _forward_names(model_cls, n_items)
    probe.uses_torch = probe.uses_torch or any(is_torch_tensor(item) for item in first)
    tensor_positions = [i for i, item in enumerate(first) if is_array(item)]
    if not tensor_positions:
        raise KernelBenchError("get_inputs returns no tensor", "a problem needs at least one input tensor")
    input_exprs: dict[int, tuple[Expr, ...]] = {}
    exact_inputs: dict[int, str] = {}  # integer and bool inputs: their own storage types (kernelbench/exact.py)
    for i in tensor_positions:
        if not all(is_array(items[i]) for items in observed):
            raise KernelBenchError(f"input {i} ({arg_names[i]}) of get_inputs is a tensor at some sizes only")
        storage = exact_dtype(first[i], f"input {i} ({arg_names[i]}) of get_inputs")
        if storage is not None:
            exact_inputs[i] = storage
        input_exprs[i] = fit_shapes(f"input {arg_names[i]}", [tuple(items[i].shape) for items in observed], rounds)
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

    # 2. The model at probe sizes: parameters, outputs, work. Where it cannot run at varied sizes, or its
    # parameters follow them, at the file's own sizes instead (fixed.py), as KernelBench runs it.
    said: list[str] = []  # lines for the definition: what is fixed, what the run mode changes
    model_notes: list[str] = []
    try:
        model_rounds, needs = probe_model(probe, used, input_exprs, model_notes)
        shapes = model_shapes(model_rounds)
        buffer_paths = model_buffers(probe, model_rounds, model_notes)
    except NotDeterministic:
        raise
    except KernelBenchError as exc:
        attempt: list[str] = []  # the notes of the last choice checked, the one taken

        def check(rounds: list[Any]) -> list[str]:
            attempt.clear()
            return model_buffers(probe, rounds, attempt)

        fallback = fixed_sizes(probe, used, exc, check)
        used, model_rounds, shapes, needs = fallback.kept, fallback.rounds, fallback.shapes, fallback.needs
        buffer_paths = fallback.buffers
        model_notes = [fallback.note, *attempt]
        said.append(fallback.note)
        var_rounds = [r.values for r in model_rounds]
        for i in tensor_positions:
            input_exprs[i] = fit_shapes(f"input {arg_names[i]}", [tuple(r.inputs[i].shape) for r in model_rounds],
                                        var_rounds)
        for i in list(scalar_exprs):
            seen = [r.inputs[i] for r in model_rounds]
            expr = fit_dimension(seen, var_rounds)
            if expr is None or expr.kind == "const":
                del scalar_exprs[i]
                fixed[i] = seen[0]
            else:
                scalar_exprs[i] = expr
        symbol_of = {v: s for v, s in symbol_of.items() if v in used}
        symbols = {s: v for v, s in symbol_of.items()}
        constants = {k: ns[k] for k in ns if not k.startswith("_") and type(ns[k]) is int and k not in used}
    notes.extend(model_notes)
    said.extend(n[0].upper() + n[1:] + "." for n in model_notes if n.startswith("forward draws random"))
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
    param_paths = shapes.param_paths + buffer_paths
    param_name: dict[str, str] = {p: _unique(_short_name(p, k), taken, "_p") for k, p in enumerate(param_paths)}
    param_exprs = dict(shapes.param_exprs)
    buffers = dict(base.model.named_buffers()) if buffer_paths else {}
    for path in buffer_paths:
        param_exprs[path] = tuple(Expr("const", const=int(d)) for d in buffers[path].shape)
    if shapes.param_paths:
        notes.append(f"the model's parameters are inputs after get_inputs' tensors: "
                     f"{', '.join(param_name[p] for p in shapes.param_paths)}")
    if buffer_paths:
        said.append(f"The model's registered buffers {', '.join(buffer_paths)} change the output: they are inputs "
                    f"({', '.join(param_name[p] for p in buffer_paths)}, last), holding the values the model "
                    "builds (a mask stays a mask).")
    n_out = len(base.outputs)
    out_names = [_unique("out" if n_out == 1 else f"out{j}", taken, "_") for j in range(n_out)]
    out_exprs = shapes.out_exprs
    batch = independent_rows(probe, base, input_exprs, out_exprs, list(param_exprs.values()))
    if batch is not None:
        notes.append(f"outputs are independent along {symbol_of[batch]} (probed: changing one row of the inputs "
                     "changed only that row of every output): the host check recomputes only the rows it checks")
    flops = fit_flops([r.flops for r in model_rounds], var_rounds, out_exprs, {v: symbol_of[v] for v in used},
                       notes)

    # 3. Generation: every input drawn like get_inputs drew it, parameters like PyTorch initializes them.
    distributions: dict[str, tuple[str, float]] = {}
    for i in tensor_positions:
        values = np.concatenate([host64(r.inputs[i]).ravel() for r in model_rounds])
        distributions[input_name[i]] = (exact_inputs[i], 0.0) if i in exact_inputs else distribution(values)
    calls = [functools.partial(probe.call_inputs, r, r_i) for r_i, r in enumerate(var_rounds)]
    ranges = {i: int_range(probe.torch if probe.uses_torch else None, calls, i, var_rounds,
                           {v: symbol_of[v] for v in used}, [host64(r.inputs[i]) for r in model_rounds], notes,
                           f"input {input_name[i]}")
              for i, storage in exact_inputs.items() if storage != "bool"}
    for path, tensor in base.params:
        init = host64(tensor)
        if init.size and np.all(init == init.flat[0]):  # a norm's weight (1) or bias (0)
            distributions[param_name[path]] = ("vector", float(init.flat[0]))
        else:
            distributions[param_name[path]] = ("weight" if tensor.dim() >= 2 else "vector", 0.0)

    held = {param_name[p]: host64(buffers[p]) for p in buffer_paths}  # a buffer input: the model's own values
    distributions |= dict.fromkeys(held, ("buffer", 0.0))

    def generate(input_name_: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        if input_name_ in held:
            return held[input_name_].reshape(shape).copy()
        kind, const = distributions.get(input_name_, ("normal", 0.0))
        return draw(kind, const, tuple(int(d) for d in shape), rng)

    names = {v: symbol_of[v] for v in used}
    inputs_decl: dict[str, Any] = {input_name[i]: tuple(e.text(names) for e in input_exprs[i])
                                   for i in tensor_positions}
    for i, storage in exact_inputs.items():  # (dtype, shape) and, for an integer, its range
        inputs_decl[input_name[i]] = (storage, inputs_decl[input_name[i]], *((ranges[i],) if i in ranges else ()))
    inputs_decl |= {param_name[p]: tuple(e.text(names) for e in param_exprs[p]) for p in param_paths}
    outputs_decl: dict[str, Any] = {out_names[j]: tuple(e.text(names) for e in out_exprs[j]) for j in range(n_out)}
    for j, out in enumerate(base.outputs):  # an argmax, a mask: their own storage types, compared exactly
        storage = exact_dtype(out, f"output {j} of forward")
        if storage is not None:
            outputs_decl[out_names[j]] = (storage, outputs_decl[out_names[j]])
    defaults = _within_elements({v: int(ns[v]) for v in used},
                                [*input_exprs.values(), *param_exprs.values(), *out_exprs], constraints, symbol_of)
    if defaults != {v: ns[v] for v in used}:
        said.append(f"Default sizes {sizes_text({symbol_of[v]: n for v, n in defaults.items()})}: the file's own "
                    f"({sizes_text({symbol_of[v]: ns[v] for v in used})}) give a buffer over {MAX_ELEMENTS:,} "
                    "elements; a session may still ask for them.")
    doc_title = title or _title(ns, model_cls) or f"KernelBench {name}"
    what = definition(model_cls, base.model, ns, get_init_inputs, base.values, constants, symbol_of,
                      said + (modes.mode_lines(probe.torch, base.model) if probe.is_module else []))
    declaration: dict[str, Any] = {
        "NAME": name,
        "TITLE": doc_title,
        "SIZES": {symbol_of[v]: n for v, n in defaults.items()},
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
        "DEFINITION": what,
        "REFERENCE_IN_FLOAT64": True,  # Runner.reference widens every input and the model to float64
        "TRAITS": traits_of_ops(base.ops, [tuple(x.shape) for x in base.inputs if is_array(x)],
                                [tuple(o.shape) for o in base.outputs]),
    }

    torch = probe.torch if probe.uses_torch else None
    runner = Runner(probe, symbols, [input_name[i] for i in tensor_positions], param_paths, fixed, scalar_exprs,
                     n_items, n_out)
    runner.exact = {k: exact_inputs[i] for k, i in enumerate(tensor_positions) if i in exact_inputs}

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
    self_check(problem, size_rounds[0], lambda *a, **s: runner.reference(a, s, "cpu"))
    signed = signed_stress(declaration, problem.distributions, generate, size_rounds[0],
                           lambda *a, **s: runner.reference(a, s, "cpu"))
    if signed:  # one trial draws them signed: a kernel that skips the negative half fails it
        declaration["STRESS_RANGE"] = signed
        declaration["DEFINITION"] = stress_line(signed, problem.distributions) + "\n" + declaration["DEFINITION"]
    return problem


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
