"""Row sum: y[r] = sum_c x[r, c], x in the session's dtype, y always f32."""

import numpy as np

NAME = "row_sum"
TRAITS = ("row_reduction",)  # the catalog texts it gets (problems/traits.py)
TITLE = "Row sum y[r] = sum of row r of x (x: ROWS x COLS in the session's dtype; y: ROWS, always f32)"
SIZES = {"ROWS": 8192, "COLS": 8192}
DTYPES = ("f32", "f16", "bf16")
INPUTS = {"x": ("ROWS", "COLS")}
OUTPUTS = {"y": ("f32", ("ROWS",))}
BATCH = "ROWS"  # rows are independent: the host check recomputes only the rows it checks
SCALARS = ("ROWS", "COLS")
FLOPS = "ROWS * COLS"
NAIVE = {"cuda": "row_sum.cu", "hip": "row_sum.cu", "hlsl": "row_sum.hlsl"}


def reference(x, *, xp):
    return x.sum(axis=1)


def error_scale(x):
    """A sum's rounding error follows sum(|x|), not |sum(x)|: zero-mean rows sum to far less than their terms."""
    return np.abs(x).sum(axis=1)


def torch_reference(x):
    return x.float().sum(dim=1)
