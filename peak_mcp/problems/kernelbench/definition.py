"""What a KernelBench file computes, said so that a kernel can be written from the MCP answer alone: how the model is
built (`Model(dim=1)`: get_init_inputs' values bound to `__init__`'s parameters), its submodules with their
arguments evaluated (`LayerNorm((64, 256), eps=1e-05, elementwise_affine=True)`, PyTorch's own repr), forward's
source, and the module's other ints (the constants the sizes leave fixed)."""

from __future__ import annotations

import inspect
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from peak_mcp.problems.kernelbench.fitting import sizes_text
from peak_mcp.problems.kernelbench.tracing import patched

MAX_DEFINITION_CHARS = 6000
MAX_VALUE_CHARS = 200  # one init argument's repr


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + "..."


def init_call(model_cls: type, init_args: list[Any]) -> str:
    """`Model(dim=1, eps=1e-05)`: the arguments by `__init__`'s parameter names where they bind, else in order."""
    try:
        bound = inspect.signature(model_cls).bind(*init_args)
        bound.apply_defaults()  # Model() with negative_slope=0.01 by default: the kernel needs that value too
        words = [f"{k}={_short(v)}" for k, v in bound.arguments.items()
                 if not isinstance(v, tuple | dict) or v]  # not an empty *args or **kwargs
    except (TypeError, ValueError):
        words = [_short(v) for v in init_args]
    return f"Model({', '.join(words)})"


_INT_TOKEN = re.compile(r"(?<![\w.\-])\d+(?![\w.])")  # an int in a repr, not a part of 1e-05 or 0.1


def symbolic(shown: str, probe_values: Mapping[str, int], constants: Mapping[str, int],
             symbol_of: Mapping[str, str]) -> tuple[str, bool]:
    """The submodules' repr with each probe value written as its size symbol (`LayerNorm((FEATURES, DIM1, DIM2))`)
    where the value stands for one symbol alone (no other symbol or fixed int has it); whether any was replaced."""
    owners: dict[int, list[str]] = {}
    for variable, value in probe_values.items():
        owners.setdefault(int(value), []).append(symbol_of.get(variable, variable))
    fixed = {int(v) for v in constants.values() if isinstance(v, int)}
    names = {value: names[0] for value, names in owners.items() if len(names) == 1 and value not in fixed}
    replaced = False

    def swap(found: re.Match[str]) -> str:
        nonlocal replaced
        name = names.get(int(found.group(0)))
        replaced = replaced or name is not None
        return name or found.group(0)

    return _INT_TOKEN.sub(swap, shown), replaced


def _floats(ns: Mapping[str, Any]) -> str:
    """The module's float constants (`multiplier = 2.0`), which the kernel must hard-code as it does the ints."""
    found = [f"{k}={v!r}" for k, v in ns.items() if isinstance(v, float) and not k.startswith("_")]
    return ", ".join(found[:20])


def _source(function: Any) -> str | None:
    try:
        return textwrap.dedent(inspect.getsource(function)).rstrip()
    except (OSError, TypeError):
        return None


def definition(model_cls: type, model: Any, ns: dict[str, Any], get_init_inputs: Callable[[], Any],
               probe_values: Mapping[str, int], constants: Mapping[str, int], symbol_of: Mapping[str, str],
               said: Sequence[str] = ()) -> str:
    """The text above, bounded by MAX_DEFINITION_CHARS. `model` was built at `probe_values`; its submodules are said
    as built there, and marked so where get_init_inputs gives other values at the file's own sizes. `said`: lines
    on how it runs (fixed sizes, eval mode, buffer inputs, random draws), placed first so that no cut drops them."""
    lines: list[str] = []
    try:
        init_args = list(get_init_inputs())
        with patched(ns, probe_values):
            at_probe = list(get_init_inputs())
    except Exception:  # the probe built the model already: a failure here only leaves the line out
        init_args = at_probe = []
    lines.append(f"Built as {init_call(model_cls, init_args)} (the file's get_init_inputs at its own sizes).")
    lines.extend(said)
    shown = repr(model) if model is not None else ""
    if shown and "\n" in shown:  # a module with submodules; a bare `Model()` says nothing
        where = ""
        if repr(at_probe) != repr(init_args):
            shown, replaced = symbolic(shown, probe_values, constants, symbol_of)
            where = (" (size symbols where the probe's values stood" if replaced else " (built at the probe's sizes")
            where += f" {sizes_text({symbol_of.get(k, k): v for k, v in probe_values.items()})})"
        lines.append(f"Its submodules{where}:\n{shown}")
    forward = _source(getattr(model_cls, "forward", None))
    lines.append(f"forward, the file's own source:\n{forward}" if forward else
                 "forward's source is not available (the class was not defined in a file)")
    if symbol_of:
        lines.append("Size symbols: " + ", ".join(f"{s} = the module's {v}" for v, s in symbol_of.items()) + ".")
    if constants:
        lines.append("The module's other ints, fixed: " + ", ".join(f"{k}={v}" for k, v in constants.items()))
    floats = _floats(ns)
    if floats:
        lines.append(f"The module's floats, fixed: {floats}")
    text = "\n".join(lines)
    return text if len(text) <= MAX_DEFINITION_CHARS else text[:MAX_DEFINITION_CHARS - 30] + "\n... (cut at 6000 chars)"
