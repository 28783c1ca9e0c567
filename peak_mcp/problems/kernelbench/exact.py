"""Integer and bool tensors of a KernelBench file (class targets, a mask, an argmax): their storage type, and the
range get_inputs draws an integer input from, read from its torch.randint calls (else observed over the probe
draws), as an expression of the size symbols where it follows them (cross entropy's targets < num_classes)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from peak_mcp.problems.kernelbench.fitting import Expr, fit_dimension
from peak_mcp.problems.kernelbench.rules import KernelBenchError

# numpy's name of a tensor's element type -> the declaration's storage type
_STORAGE = {"int64": "int64", "int32": "int32", "uint8": "uint8", "int8": "int8", "bool": "bool"}


def exact_dtype(x: Any, what: str) -> str | None:
    """The declaration's storage type of an integer or bool tensor (None for a floating one); a KernelBenchError
    for an element type no buffer holds (int16, complex)."""
    dtype = getattr(x, "dtype", None)
    name = str(dtype).removeprefix("torch.")
    if getattr(x, "is_floating_point", None) is not None:
        if x.is_floating_point():
            return None
    elif np.asarray(x).dtype.kind == "f":
        return None
    name = {"long": "int64", "int": "int32"}.get(name, name)
    if name not in _STORAGE:
        raise KernelBenchError(f"{what} holds {name} elements; buffers hold floating point, int32, int64, uint8, "
                               "int8 or bool")
    return _STORAGE[name]


def torch_dtype(torch: Any, storage: str) -> Any:
    return {"int64": torch.int64, "int32": torch.int32, "uint8": torch.uint8, "int8": torch.int8,
            "bool": torch.bool}[storage]


def traced_randint(torch: Any, call: Callable[[], list[Any]], position: int) -> tuple[int, int] | None:
    """(low, high) of the torch.randint call that drew get_inputs' item `position` (its values, converted or not),
    from one call of get_inputs with torch.randint recorded; None when no randint call made it."""
    if torch is None:
        return None
    real = torch.randint
    calls: list[tuple[int, int, Any]] = []

    def recorded(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        ints = [a for a in args if isinstance(a, int) and not isinstance(a, bool)]
        low, high = (0, ints[0]) if len(ints) == 1 else tuple(ints[:2]) if len(ints) >= 2 else (None, None)
        low, high = kwargs.get("low", low), kwargs.get("high", high)
        if isinstance(low, int) and isinstance(high, int):
            calls.append((low, high, out))
        return out

    torch.randint = recorded
    try:
        items = call()
    finally:
        torch.randint = real
    item = items[position]
    for low, high, out in calls:
        if tuple(out.shape) == tuple(item.shape) and bool((out.to(torch.int64) == item.to(torch.int64)).all()):
            return low, high
    return None


def int_range(torch: Any, calls: Sequence[Callable[[], list[Any]]], position: int, rounds: Sequence[Mapping[str, int]],
              names: Mapping[str, str], seen: Sequence[Any], notes: list[str], label: str) -> tuple[str, str]:
    """[low, high) of an integer input as two expressions over the symbols (`names`: variable -> symbol): from its
    torch.randint call in each round (`calls`: get_inputs at each of `rounds`), fitted to the sizes; where no randint
    drew it, the least and one past the largest value `seen` over the probe draws, constants."""
    traced = [traced_randint(torch, call, position) for call in calls]
    if traced and all(t is not None for t in traced):
        ends = [fit_dimension([t[k] for t in traced], [{v: r[v] for v in names} for r in rounds]) if names else
                (Expr("const", const=traced[0][k]) if len({t[k] for t in traced}) == 1 else None)
                for k in (0, 1)]
        if all(e is not None for e in ends):
            return ends[0].text(names), ends[1].text(names)
    values = np.concatenate([np.asarray(s, dtype=np.int64).ravel() for s in seen])
    low, high = int(values.min()), int(values.max()) + 1
    notes.append(f"{label}: no torch.randint call that follows the sizes drew it; its values are drawn from "
                 f"[{low}, {high}), the range seen over the probe draws")
    return str(low), str(high)


def draw_exact(storage: str, bounds: tuple[int, int] | None, shape: tuple[int, ...],
               rng: np.random.Generator) -> np.ndarray:
    """float64 values of an integer or bool input, uniform in [low, high) (bool: 0 or 1)."""
    low, high = (0, 2) if storage == "bool" or bounds is None else bounds
    return rng.integers(low, high, shape).astype(np.float64)
