"""How a KernelBench model runs: in eval mode (dropout off, so that a reference is deterministic) except its batch
norms, which keep the batch statistics KernelBench computes (it never calls eval()); under torch's default dtype set
to the inputs' (a `torch.randn` inside forward then draws float64 next to a float64 model); and what of that the
definition says."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def prepare(torch: Any, model: Any) -> Any:
    """The model in eval mode, its batch and instance norms back in training mode (batch statistics)."""
    model.eval()
    norms = tuple(getattr(mod, name) for mod, name in (
        (torch.nn.modules.batchnorm, "_BatchNorm"), (torch.nn.modules.instancenorm, "_InstanceNorm"))
        if hasattr(mod, name))
    for sub in model.modules():
        if isinstance(sub, norms):
            sub.train()
    return model


@contextlib.contextmanager
def default_dtype(torch: Any, dtype: Any) -> Iterator[None]:
    """torch's default dtype set to `dtype` (a floating type torch accepts as default) for the duration."""
    saved = torch.get_default_dtype()
    try:
        torch.set_default_dtype(dtype)
    except (TypeError, ValueError, RuntimeError):  # a type torch will not take as default: leave it
        yield
        return
    try:
        yield
    finally:
        torch.set_default_dtype(saved)


def first_float_dtype(torch: Any, args: Any) -> Any | None:
    return next((a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()), None)


def mode_lines(torch: Any, model: Any) -> list[str]:
    """What the run mode changes for this model, said in the definition."""
    lines = []
    dropouts = [n for n, m in model.named_modules()
                if isinstance(m, torch.nn.modules.dropout._DropoutNd) or
                (isinstance(m, torch.nn.RNNBase) and m.dropout)]
    if dropouts:
        more = ", ..." if len(dropouts) > 6 else ""
        lines.append(f"Run in eval mode: dropout is off ({', '.join(dropouts[:6])}{more}).")
    if any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        lines.append("Batch norms use the batch's own statistics (training mode, as KernelBench runs them); their "
                     "running statistics do not change the output.")
    return lines
