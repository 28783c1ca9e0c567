"""RMS norm: y[r, c] = x[r, c] * rsqrt(mean_c(x[r, :]^2) + 1e-6) * w[c], eps fixed at 1e-6; y in the session's dtype."""

import numpy as np

NAME = "rmsnorm"
TRAITS = ("normalization", "row_reduction")  # the catalog texts it gets (problems/traits.py)
TITLE = "RMS norm y = x * rsqrt(mean(x^2 over the row) + 1e-6) * w (x, y: ROWS x COLS; w: COLS; eps = 1e-6)"
SIZES = {"ROWS": 8192, "COLS": 8192}
DTYPES = ("f32", "f16", "bf16")
INPUTS = {"x": ("ROWS", "COLS"), "w": ("COLS",)}
OUTPUTS = {"y": ("ROWS", "COLS")}
BATCH = "ROWS"  # rows are independent: the host check recomputes only the rows it checks
SCALARS = ("ROWS", "COLS")
FLOPS = "4 * ROWS * COLS + 3 * ROWS"  # square and add; two products per element; mean, eps and rsqrt per row
BYTES = None  # x and w read once, y written once
RANGE = {"w": (0.5, 1.5)}
STRESS_RANGE = {"x": (-300.0, 300.0)}  # one trial: a sum of squares past f16's range (65504) within a few elements
NAIVE = {"cuda": "rmsnorm.cu", "hip": "rmsnorm.cu", "hlsl": "rmsnorm.hlsl"}
EPS = 1e-6


def reference(x, w, *, xp):
    r = 1.0 / xp.sqrt((x * x).mean(axis=1, keepdims=True) + EPS)
    return x * r * w[None, :]


def error_scale(x, w, *, COLS):
    """A correct f32 kernel is off by the sum of squares' error (growing with sqrt(COLS) in any order of a sum of
    positive terms), halved by the square root, plus a few roundings (rsqrt, two products): relative to y."""
    y = reference(x, w, xp=np)
    magnitude = np.maximum(np.abs(y), np.sqrt(np.mean(y * y)))
    return magnitude * (4.0 + np.sqrt(COLS))


def torch_reference(x, w):
    import torch

    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(dim=1, keepdim=True) + EPS) * w.float()).to(x.dtype)
