"""How many rows a row problem has at given sizes and how long each is, read from its declared buffers, for ranking
row texts: a warp per row is for short rows, a cluster per row for few long ones, persistent blocks for many rows.

A row is what one output element's statistic runs over. The declaration says it in one of three ways: a per-row
parameter whose shape is the input's trailing axes (a LayerNorm's weight over FEATURES x DIM1 x DIM2: the row is
those three axes), an output with fewer elements than the input (a row sum: input over output), or else the last
axis (a softmax)."""

from __future__ import annotations

import math
from typing import NamedTuple

from peak_mcp.core.expressions import evaluate
from peak_mcp.problems.declaration import ProblemDeclaration

SHORT_ROW = 4096  # elements: a warp per row pays off up to a few thousand (row-per-warp's own text)
LONG_ROW = 65536  # elements: a row a block alone streams for long


class RowShape(NamedTuple):
    rows: int
    length: int


def row_shape(declaration: ProblemDeclaration, sizes: dict[str, int]) -> RowShape | None:
    """(rows, elements per row) of the declaration's largest input at `sizes`, or None where it cannot be read."""
    if not declaration.inputs or not declaration.outputs:
        return None
    try:
        inputs = [[evaluate(e, sizes) for e in b.shape] for b in declaration.inputs]
        outputs = [[evaluate(e, sizes) for e in b.shape] for b in declaration.outputs]
    except Exception:  # a shape this size set does not evaluate: no ranking from it
        return None
    if any(n <= 0 for s in inputs + outputs for n in s):
        return None
    shape = max(inputs, key=math.prod)  # the data; a per-row parameter may come first
    if not shape:
        return None
    total, length = math.prod(shape), shape[-1]
    for other in inputs:  # a per-row parameter: the trailing axes it spans are the row
        if 0 < len(other) < len(shape) and other == shape[len(shape) - len(other):]:
            length = max(length, math.prod(other))
    out = math.prod(outputs[0])  # every extent is positive: at least 1
    if out < total:  # fewer outputs than inputs: each reduces input / output elements
        length = max(length, total // out)
    return RowShape(rows=max(1, total // length), length=length)


def row_suggestion(tags: tuple[str, ...] | list[str], shape: RowShape | None,
                   units: int | None) -> tuple[float, list[str]]:
    """A row text's rank adjustment and its reason, from the text's row tags and the session's row shape."""
    if shape is None:
        return 0.0, []
    rows, length = shape
    if "short-rows" in tags and length > SHORT_ROW:
        return -3.0, [f"rows of {length:,} elements here: a warp per row streams a long row alone"]
    if "long-rows" in tags:
        if units and rows < units and length >= LONG_ROW:
            return 2.0, [f"only {rows:,} rows of {length:,} elements for {units} SMs: a block per row leaves most "
                         "SMs idle"]
        if units and rows >= units:
            return -3.0, [f"{rows:,} rows for {units} SMs: a block per row already fills the device"]
        return -3.0, [f"rows of {length:,} elements: short enough for one block each"]
    if "many-rows" in tags and units and rows < 2 * units:
        return -2.0, [f"only {rows:,} rows for {units} SMs: little for persistent blocks to loop over"]
    return 0.0, []
