"""What a KernelBench module reads (the int variables its functions reference, patched for a round), and its arrays
as torch or numpy."""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from peak_mcp.problems.kernelbench.rules import KernelBenchError


def code_objects(obj: Any) -> list[types.CodeType]:
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        return [c for f in (obj.fget, obj.fset) if f is not None for c in code_objects(f)]
    if isinstance(obj, types.FunctionType):
        return [obj.__code__]
    if isinstance(obj, type):
        return [c for member in vars(obj).values() for c in code_objects(member)]
    return []


def referenced_names(roots: Sequence[Any], namespace: Mapping[str, Any]) -> set[str]:
    """Global names the code of `roots` reads, following nested code and the module's own functions and classes."""
    module_name = namespace.get("__name__")
    stack = [c for root in roots for c in code_objects(root)]
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
                stack += code_objects(value)
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


def torch_module() -> Any | None:
    """torch if the problem module (or anything before it) imported it; never imported here."""
    return sys.modules.get("torch")


def is_torch_tensor(x: Any) -> bool:
    torch = torch_module()
    return torch is not None and isinstance(x, torch.Tensor)


def is_array(x: Any) -> bool:
    return isinstance(x, np.ndarray) or is_torch_tensor(x)


def element_kind(x: Any) -> str:
    if is_torch_tensor(x):
        if x.is_complex():
            return "complex"
        if x.is_floating_point():
            return "float"
        return "bool" if x.dtype == torch_module().bool else "integer"
    kind = np.asarray(x).dtype.kind
    return {"f": "float", "c": "complex", "b": "bool"}.get(kind, "integer")


def article(word: str) -> str:
    return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


def host64(x: Any) -> np.ndarray:
    if is_torch_tensor(x):
        return x.detach().to("cpu", torch_module().float64).numpy()
    return np.asarray(x, dtype=np.float64)


def same(a: Any, b: Any) -> bool:
    return bool(np.array_equal(host64(a), host64(b), equal_nan=True))


def outputs_of(result: Any) -> list[Any]:
    items = list(result) if isinstance(result, (tuple, list)) else [result]
    for i, item in enumerate(items):
        if not is_array(item):
            where = f"item {i} of its result" if isinstance(result, (tuple, list)) else "its result"
            raise KernelBenchError(f"forward returned {type(item).__name__} as {where}; only tensors can be outputs",
                                   "return a tensor, or a tuple of tensors")
        kind = element_kind(item)
        if kind == "complex":  # integer and bool outputs (an argmax, a mask) are compared exactly
            raise KernelBenchError(f"forward returns a complex tensor (output {i}); outputs must be real")
    return items
