"""2-D convolution (cross-correlation, as in every framework): y[n, p, q, k] = sum over r, s, c of
x[n, p*STRIDE - PAD + r*DIL, q*STRIDE - PAD + s*DIL, c] * w[k, r, s, c], positions outside x read as 0. x: N x H x W x C
(NHWC), w: K x R x S x C (KRSC), y: N x P x Q x K with P = (H + 2 PAD - DIL (R - 1) - 1) // STRIDE + 1 (Q likewise
from W and S); y in the session's dtype."""

import numpy as np

NAME = "conv2d"
TRAITS = ("convolution",)  # the catalog texts it gets (problems/traits.py)
TITLE = "2-D convolution y = conv(x, w), NHWC x, KRSC w, NPQK y; stride, padding and dilation are size symbols"
# A ResNet-50 3x3 layer (conv2_x): 32 images of 56 x 56 x 64, 64 filters of 3 x 3, padding 1.
SIZES = {"N": 32, "H": 56, "W": 56, "C": 64, "K": 64, "R": 3, "S": 3, "STRIDE": 1, "PAD": 1, "DIL": 1}
DTYPES = ("f32", "f16", "bf16")
P = "(H + 2 * PAD - DIL * (R - 1) - 1) // STRIDE + 1"
Q = "(W + 2 * PAD - DIL * (S - 1) - 1) // STRIDE + 1"
INPUTS = {"x": ("N", "H", "W", "C"), "w": ("K", "R", "S", "C")}
OUTPUTS = {"y": ("N", P, Q, "K")}
SCALARS = {**{s: s for s in SIZES}, "P": P, "Q": Q}
# The filter's extent within the padded input: P and Q are at least 1.
CONSTRAINTS = ("H + 2 * PAD >= DIL * (R - 1) + 1", "W + 2 * PAD >= DIL * (S - 1) + 1")
# Parameters, not extents: generality takes them from these values (1x1, 3x3, 2x2 and 5x5 filters; strides 1-3;
# padding 0-2; dilation 1-2) while N, H, W, C and K get the awkward sizes.
SAMPLES = {"R": (1, 3, 2, 5), "S": (1, 3, 2, 5), "STRIDE": (1, 2, 3), "PAD": (0, 1, 2), "DIL": (1, 2)}
FLOPS = f"2 * N * ({P}) * ({Q}) * K * C * R * S"
BATCH = "N"  # images are independent: the host check recomputes only the images it checks
REDUCTION = "C * R * S"  # one output element sums C*R*S products
TENSOR_CORES = True  # a GEMM in disguise: f16/bf16 kernels are judged against the tensor-core peak
NAIVE = {"cuda": "conv2d.cu", "hip": "conv2d.cu", "hlsl": "conv2d.hlsl"}


def _conv(x, w, xp, STRIDE, PAD, DIL):
    """im2col by filter tap: for each (r, s), the strided window of the zero-padded input as an (N*P*Q, C) matrix
    times w[:, r, s, :] transposed; R*S matrix products, no loop over elements."""
    n, h, wd, c = x.shape
    k, r, s, _ = w.shape
    p = (h + 2 * PAD - DIL * (r - 1) - 1) // STRIDE + 1
    q = (wd + 2 * PAD - DIL * (s - 1) - 1) // STRIDE + 1
    padded = xp.pad(x, ((0, 0), (PAD, PAD), (PAD, PAD), (0, 0)))
    y = xp.zeros((n * p * q, k), dtype=x.dtype)
    for i in range(r):
        for j in range(s):
            window = padded[:, i * DIL: i * DIL + STRIDE * (p - 1) + 1: STRIDE,
                            j * DIL: j * DIL + STRIDE * (q - 1) + 1: STRIDE, :]
            y += xp.ascontiguousarray(window).reshape(n * p * q, c) @ w[:, i, j, :].T
    return y.reshape(n, p, q, k)


def reference(x, w, *, xp, STRIDE, PAD, DIL):
    return _conv(x, w, xp, STRIDE, PAD, DIL)


def error_scale(x, w, *, STRIDE, PAD, DIL):
    """A sum's rounding error follows the sum of its terms' magnitudes, not its value (random signs cancel):
    conv(|x|, |w|), the same sum of C*R*S products with every term positive."""
    return _conv(np.abs(x), np.abs(w), np, STRIDE, PAD, DIL)


def torch_reference(x, w, *, STRIDE, PAD, DIL):
    """cuDNN through torch: NHWC and KRSC are channels_last views of NCHW and KCRS, so the permutes copy nothing.
    The server times it with cuDNN's heuristic pick and with cudnn.benchmark (its fastest algorithm by timing) and
    takes the faster; TF32 is off, so an f32 session's yardstick computes f32."""
    import torch

    torch.backends.cudnn.allow_tf32 = False
    y = torch.nn.functional.conv2d(x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2), stride=STRIDE, padding=PAD,
                                   dilation=DIL)
    return y.permute(0, 2, 3, 1)
