"""The shipped problems' tolerances against simulated kernels, at sizes no CPU Vulkan device reaches quickly.

tools/false_failures.py runs the real kernels through MCP (on lavapipe here); what it cannot run (CUDA's fast-math
exp and division, FMA, bf16, rows of 8192 and 32773) is simulated here in numpy, element for element in f32 in
each kernel's order of operations: sequential sums (the naive kernels), 256-way strided sums reduced as a tree
(block reductions), numpy's pairwise sums, online softmax; exp with a 1 ulp (libm) or a 2 ulp plus argument
rounding (__expf) error; and precision loss: the row's sum accumulated in f16 or bf16. Each line prints, per
variant, max |out - ref| / bound and rel_l2 / its bound, from the problems' own references (DeclaredProblem):
correct variants must stay well under 1, LOSS_ variants over it (for an f32 session at least).

    python tools/tolerance_sim.py [softmax rmsnorm row_sum]
"""

from __future__ import annotations

import sys

import numpy as np

from peak_mcp.core.dtypes import from_float, to_float64
from peak_mcp.problems.loading import problem_code_allowed
from peak_mcp.problems.shipped import get_problem

F32, F16 = np.float32, np.float16
LOG2E = F32(1.4426950408889634)
RNG = np.random.default_rng(1)


def bf16(values: np.ndarray) -> np.ndarray:
    return to_float64(from_float(np.asarray(values, F32), "bf16"), "bf16").astype(F32)


def rounded(kind: str, values: np.ndarray) -> np.ndarray:
    """Round to an accumulator of `kind` (kept as f32 values)."""
    if kind == "f32":
        return np.asarray(values, F32)
    if kind == "f16":
        return np.asarray(values, F16).astype(F32)
    return bf16(values)


def fast_exp(x: np.ndarray) -> np.ndarray:
    """__expf: ex2.approx of the f32 product x * log2(e): the product's rounding plus about 2 ulp (exact at 0)."""
    t = (x.astype(F32) * LOG2E).astype(F32)
    y = np.exp2(t.astype(np.float64))
    return (y * (1 + RNG.uniform(-2, 2, y.shape) * 2.0**-23 * (x != 0))).astype(F32)


def exp32(x: np.ndarray) -> np.ndarray:
    """An f32 exp with up to 1 ulp error (exact at 0, as every libm is)."""
    y = np.exp(x.astype(np.float64))
    return (y * (1 + RNG.uniform(-1, 1, y.shape) * 2.0**-23 * (x != 0))).astype(F32)


def seq_sum(terms: np.ndarray, acc: str = "f32") -> np.ndarray:
    """Each row summed in order, the accumulator rounded to `acc` after every addition."""
    total = np.zeros(terms.shape[0], F32)
    for c in range(terms.shape[1]):
        total = rounded(acc, total.astype(np.float64) + terms[:, c].astype(np.float64))
    return total


def strided_sum(terms: np.ndarray, threads: int = 256) -> np.ndarray:
    """A block reduction: thread t sums columns t, t + threads, ...; the partial sums are added as a tree."""
    rows, cols = terms.shape
    parts = np.zeros((rows, threads), F32)
    for start in range(0, cols, threads):
        chunk = terms[:, start:start + threads]
        parts[:, :chunk.shape[1]] = (parts[:, :chunk.shape[1]] + chunk).astype(F32)
    while parts.shape[1] > 1:
        half = parts.shape[1] // 2
        parts = (parts[:, :half] + parts[:, half:2 * half]).astype(F32)
    return parts[:, 0]


def softmax_variants(x: np.ndarray) -> dict[str, np.ndarray]:
    x = x.astype(F32)
    shifted = (x - x.max(axis=1, keepdims=True)).astype(F32)
    e, fast = exp32(shifted), fast_exp(shifted)
    out = {"seq": (e / seq_sum(e)[:, None]).astype(F32),
           "seq_fastexp": (fast / seq_sum(fast)[:, None]).astype(F32),
           "fastexp_fdividef": (fast * (F32(1) / seq_sum(fast))[:, None]).astype(F32),
           "strided_tree": (e / strided_sum(e)[:, None]).astype(F32)}
    running, total = np.full(x.shape[0], -np.inf, F32), np.zeros(x.shape[0], F32)
    for c in range(x.shape[1]):  # online softmax: a running max, the sum rescaled when it grows
        new = np.maximum(running, x[:, c])
        total = (total * exp32((running - new).astype(F32)) + exp32((x[:, c] - new).astype(F32))).astype(F32)
        running = new
    out["online"] = (exp32((x - running[:, None]).astype(F32)) / total[:, None]).astype(F32)
    out["LOSS_sum_f16"] = (e / seq_sum(e, "f16")[:, None]).astype(F32)
    out["LOSS_sum_bf16"] = (e / seq_sum(e, "bf16")[:, None]).astype(F32)
    return out


def rmsnorm_variants(x: np.ndarray, w: np.ndarray) -> dict[str, np.ndarray]:
    x, w = x.astype(F32), w.astype(F32)
    cols = x.shape[1]
    squares = (x * x).astype(F32)

    def finish(ss: np.ndarray) -> np.ndarray:  # rsqrt with a 2 ulp error, then two products
        r = 1.0 / np.sqrt((ss / F32(cols) + F32(1e-6)).astype(np.float64))
        r = (r * (1 + RNG.uniform(-2, 2, r.shape) * 2.0**-23)).astype(F32)
        return ((x * r[:, None]).astype(F32) * w[None, :]).astype(F32)

    fma = np.zeros(x.shape[0], F32)
    for c in range(cols):  # fmaf(v, v, ss): one rounding per step
        fma = (fma.astype(np.float64) + x[:, c].astype(np.float64) ** 2).astype(F32)
    return {"seq": finish(seq_sum(squares)), "seq_fma": finish(fma), "strided_tree": finish(strided_sum(squares)),
            "LOSS_sum_f16": finish(seq_sum(squares, "f16")), "LOSS_sum_bf16": finish(seq_sum(squares, "bf16"))}


def row_sum_variants(x: np.ndarray) -> dict[str, np.ndarray]:
    x = x.astype(F32)
    return {"seq": seq_sum(x), "strided_tree": strided_sum(x), "pairwise": x.sum(axis=1, dtype=F32),
            "LOSS_sum_f16": seq_sum(x, "f16"), "LOSS_sum_bf16": seq_sum(x, "bf16")}


def run(name: str, dtype: str, sizes: dict[str, int]) -> None:
    problem = get_problem(name)
    with problem_code_allowed():
        inputs = problem.make_inputs(sizes, dtype, 7, np)
        refs = problem.reference(inputs, sizes, dtype, 7, float("inf"), np)
    tol = problem.tolerance(dtype, sizes)
    shapes = {b.name: problem.arguments(dtype)[i].shape(sizes) for i, b in enumerate(problem.declaration.inputs)}
    xs = {k: to_float64(v, dtype).reshape(shapes[k]).astype(F32) for k, v in inputs.items()}
    if name == "softmax":
        variants = softmax_variants(xs["x"])
    elif name == "rmsnorm":
        variants = rmsnorm_variants(xs["x"], xs["w"])
    else:
        variants = row_sum_variants(xs["x"])
    ref = refs["y"]
    out_dtype = problem.declaration.outputs[0].dtype or dtype
    cells = []
    for variant, y in variants.items():
        got = to_float64(from_float(y.reshape(-1).astype(F32), out_dtype), out_dtype)
        err = np.abs(got - ref.values)
        ratio = float((err / (tol.elementwise * ref.scale)).max())
        rel = float(np.linalg.norm(err) / ref.norm) / ref.rel_l2
        cells.append(f"{variant}={ratio:.3g}/{rel:.3g}")
    print(f"{name:8s} {dtype:4s} {sizes}", "  ".join(cells), flush=True)


# The sampled sizes of a 64 x 100 session, of an 8192 x 8192 one (a row of 8192, and 32773 past it), rows of 2.
SIZES = [{"ROWS": 64, "COLS": 100}, {"ROWS": 7, "COLS": 1029}, {"ROWS": 33, "COLS": 4101},
         {"ROWS": 512, "COLS": 8192}, {"ROWS": 33, "COLS": 32773}, {"ROWS": 1031, "COLS": 7}, {"ROWS": 97, "COLS": 2}]

if __name__ == "__main__":
    for name in sys.argv[1:] or ["softmax", "rmsnorm", "row_sum"]:
        for dtype in ("f32", "f16", "bf16"):
            for sizes in SIZES:
                run(name, dtype, sizes)
