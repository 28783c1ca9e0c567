"""Row softmax: y[r, c] = exp(x[r, c] - m_r) / sum_c exp(x[r, c] - m_r), m_r the row's max; y in the session dtype."""

import numpy as np

NAME = "softmax"
TRAITS = ("softmax", "row_reduction")  # the catalog texts it gets (problems/traits.py)
TITLE = "Row softmax y = softmax(x) along each row (x, y: ROWS x COLS, y in the session's dtype)"
SIZES = {"ROWS": 8192, "COLS": 8192}
DTYPES = ("f32", "f16", "bf16")
INPUTS = {"x": ("ROWS", "COLS")}
OUTPUTS = {"y": ("ROWS", "COLS")}
BATCH = "ROWS"  # rows are independent: the host check recomputes only the rows it checks
SCALARS = ("ROWS", "COLS")
FLOPS = "5 * ROWS * COLS"  # max, subtract, exp, add; divide (an exp counted as one)
RANGE = {"x": (-4.0, 4.0)}
STRESS_RANGE = {"x": (40.0, 100.0)}  # one trial: exp(x) overflows f32 past 88 unless the row max is subtracted
NAIVE = {"cuda": "softmax.cu", "hip": "softmax.cu", "hlsl": "softmax.hlsl"}


def reference(x, *, xp):
    shifted = x - x.max(axis=1, keepdims=True)
    e = xp.exp(shifted)
    return e / e.sum(axis=1, keepdims=True)


def error_scale(x, *, COLS):
    """A correct f32 softmax is off by the exp's error, which grows with its argument |x - max| (fast exp: about
    2 + 1.2 |x - max| ulp), and by the row sum's, which grows with sqrt(COLS) in any order of a sum of positive
    terms; both relative to y."""
    y = reference(x, xp=np)
    magnitude = np.maximum(np.abs(y), np.sqrt(np.mean(y * y)))
    return magnitude * (2.0 + np.abs(x - x.max(axis=1, keepdims=True)) + np.sqrt(COLS))


def torch_reference(x):
    import torch

    return torch.softmax(x.float(), dim=1).to(x.dtype)
