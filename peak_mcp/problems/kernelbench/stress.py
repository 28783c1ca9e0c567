"""A signed stress draw for inputs KernelBench draws non-negative (`torch.rand`: [0, 1)).

A kernel checked only on positive inputs can skip what the model does to negative ones: an identity kernel passes a
LeakyReLU (or a ReLU, a clamp at 0, an abs) on every `torch.rand` draw. Where the reference stays finite on signed
inputs at the probe's sizes, the declaration gets a STRESS_RANGE for those inputs: one validation trial draws them in
(-1, 1) (or +-3 for a half-normal draw), and the definition says so. Inputs the model needs non-negative (a log, a
sqrt, probabilities) give NaN there and keep their own draw alone."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from peak_mcp.problems.kernelbench.wrapper import declared_inputs

SIGNED = {"uniform01": (-1.0, 1.0), "halfnormal": (-3.0, 3.0)}  # the non-negative draws, and their signed range
DRAW_WORDS = {"uniform01": "uniform in [0, 1)", "halfnormal": "|standard normal|"}


def signed_stress(declaration: Mapping[str, Any], distributions: Mapping[str, str],
                  generate: Callable[[str, tuple[int, ...], np.random.Generator], np.ndarray],
                  sizes: Mapping[str, int], reference: Callable[..., Any]) -> dict[str, tuple[float, float]]:
    """{input: (low, high)} for the non-negative float inputs the reference takes signed and stays finite on."""
    candidates = {n: SIGNED[kind] for n, kind in distributions.items() if kind in SIGNED}
    if not candidates:
        return {}
    values = {s: int(sizes[s]) for s in declaration["SCALARS"]}
    arrays = declared_inputs(declaration, generate, values, np.random.default_rng(1), signed=candidates)
    try:
        with np.errstate(all="ignore"):  # a NaN here is an answer (the model needs non-negative inputs), not news
            result = reference(*arrays, **values)
    except Exception:  # the model refuses signed inputs: they keep the file's own draw
        return {}
    outs = result if isinstance(result, tuple) else (result,)
    if not all(np.all(np.isfinite(np.asarray(o, dtype=np.float64))) for o in outs):
        return {}
    return candidates


def stress_line(ranges: Mapping[str, tuple[float, float]], distributions: Mapping[str, str]) -> str:
    """The definition's line on the draws: as get_inputs draws them, and the signed stress trial."""
    said = ", ".join(f"{n} in ({lo:g}, {hi:g})" for n, (lo, hi) in ranges.items())
    kinds = ", ".join(f"{n} {DRAW_WORDS.get(distributions[n], distributions[n])}" for n in ranges)
    return (f"Inputs: drawn as get_inputs draws them ({kinds}); one validation trial draws {said} instead, so a "
            "kernel must be right for negative values too.")
