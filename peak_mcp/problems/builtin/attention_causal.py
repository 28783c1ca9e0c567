"""Causal attention forward: o_i = softmax over keys j <= i of q_i k_j / sqrt(D), times v; B x H x S x D."""

import math

NAME = "attention_causal"
TRAITS = ("attention",)  # the catalog texts it gets (problems/traits.py)
TITLE = ("Causal attention forward o = softmax(q k^T / sqrt(D), keys j <= query i) v (q, k, v, o: B x H x S x D in "
         "the session's dtype; CAUSAL=1 passed for a kernel shared with attention)")
SIZES = {"B": 4, "H": 32, "S": 4096, "D": 128}
DTYPES = ("bf16", "f16", "f32")
INPUTS = {"q": ("B", "H", "S", "D"), "k": ("B", "H", "S", "D"), "v": ("B", "H", "S", "D")}
OUTPUTS = {"o": ("B", "H", "S", "D")}
# CAUSAL is a constant argument, not a size symbol: the generality check samples every symbol (7, 100, 97, 65, ...),
# which a 0/1 flag cannot take; attention and attention_causal share the ABI and their kernels.
SCALARS = {"B": "B", "H": "H", "S": "S", "D": "D", "CAUSAL": 1}
FLOPS = "2 * B * H * S * (S + 1) * D"  # q k^T and p v over the S (S + 1) / 2 unmasked pairs, 2 D flops each
TENSOR_CORES = True  # both products run on tensor cores in a fast kernel: f16/bf16 are held to the tensor peak
BATCH = ("B", "H")  # heads are independent: the host check recomputes only the heads it checks
REDUCTION = "S"  # the longest sum behind an output element: p v over the keys (q k^T sums D < S terms)
# One trial: scores of 36 sqrt(D) and more (q, k in (4, 8)): exp overflows f32 past 88 without the max (D >= 8).
STRESS_RANGE = {"q": (4.0, 8.0), "k": (4.0, 8.0)}
NAIVE = {"cuda": "attention.cu", "hip": "attention.cu", "hlsl": "attention.hlsl"}
CAUSAL = True
HEAD_CHUNK = 1 << 27  # score elements per step of the reference (1 GiB of float64)
UNIT_ROUNDOFF = {"f32": 2.0**-24, "f16": 2.0**-11, "bf16": 2.0**-8}


def attend(q, k, v, xp, causal):
    """softmax(q k^T / sqrt(D)) v per head, in q's precision (float64, or float32 for lp), heads in chunks whose
    score matrices fit HEAD_CHUNK elements; `causal` masks key j > query i."""
    b, h, s, d = q.shape
    q3, k3, v3 = (a.reshape(b * h, s, d) for a in (q, k, v))
    out = xp.empty_like(q3)
    masked = xp.triu(xp.ones((s, s), dtype=bool), 1) if causal else None
    step = max(1, HEAD_CHUNK // (s * s))
    for first in range(0, b * h, step):
        part = slice(first, first + step)
        scores = xp.matmul(q3[part], k3[part].transpose(0, 2, 1)) * (1.0 / math.sqrt(d))
        if causal:
            scores = xp.where(masked, -xp.inf, scores)
        scores -= scores.max(axis=2, keepdims=True)
        p = xp.exp(scores, out=scores)
        out[part] = xp.matmul(p, v3[part]) / p.sum(axis=2, keepdims=True)
    return out.reshape(q.shape)


def bound_scale(q, k, v, xp, causal, dtype):
    """Per output element, the scale of a correct kernel's error in units of f32 roundoff, computed beside the
    reference (heads in the same chunks). o_i = sum_j p_ij v_j is a sum of n_i weights times v, conditioned by
    sum_j p_ij |v_j| (its rounding grows with sqrt(n_i)); a score's error (a D-term dot product: sqrt(D) scale
    |q_i|_1 max|k|, and the exp's, which grows with |s - max| <= 2 scale |q_i|_1 max|k|) moves p_ij relatively, so o_i
    by up to sum_j p_ij |v_j| times it. p rounded to the session's type as the operand of the p v product (what
    flash-attention kernels do) adds independent roundings: u_dtype sqrt(sum_j p_ij^2 v_j^2)."""
    b, h, s, d = q.shape
    q3, k3, v3 = (a.reshape(b * h, s, d) for a in (q, k, v))
    out = xp.empty_like(q3)
    rounding = UNIT_ROUNDOFF[dtype] / UNIT_ROUNDOFF["f32"]
    n = xp.arange(1, s + 1, dtype=q3.dtype)[None, :, None] if causal else float(s)
    kmax = xp.abs(k3).max(axis=(1, 2), keepdims=True)
    scores_err = xp.sqrt(n) + 4.0 + 3.0 * (math.sqrt(d) + 1.0) * xp.abs(q3).sum(axis=2, keepdims=True) * kmax \
        / math.sqrt(d)
    masked = xp.triu(xp.ones((s, s), dtype=bool), 1) if causal else None
    step = max(1, HEAD_CHUNK // (s * s))
    for first in range(0, b * h, step):
        part = slice(first, first + step)
        p = xp.matmul(q3[part], k3[part].transpose(0, 2, 1)) * (1.0 / math.sqrt(d))
        if causal:
            p = xp.where(masked, -xp.inf, p)
        p -= p.max(axis=2, keepdims=True)
        p = xp.exp(p, out=p)
        p /= p.sum(axis=2, keepdims=True)
        out[part] = xp.matmul(p, xp.abs(v3[part])) * scores_err[part]
        out[part] += rounding * xp.sqrt(xp.matmul(p * p, v3[part] * v3[part]))
    return out.reshape(q.shape)


def reference(q, k, v, *, xp):
    return attend(q, k, v, xp, CAUSAL)


def error_scale(q, k, v, *, xp, dtype):
    return bound_scale(q, k, v, xp, CAUSAL, dtype)


def torch_reference(q, k, v):
    """PyTorch's scaled_dot_product_attention as torch dispatches it; the server also times it pinned to each of
    SDPA's backends (flash, cuDNN, memory-efficient) and takes the fastest as the yardstick."""
    import torch

    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=CAUSAL)
