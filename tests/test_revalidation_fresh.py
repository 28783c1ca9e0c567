"""A version faster than the vendor is validated again on fresh inputs (runner/jobs.evaluate): where the problem has
stress ranges, a fresh stress set too. The hostile review's kernel (review 43): a softmax without the max subtraction
(exp overflows past x = 88) that subtracts the max only when x[0] holds the kept stress set's bits. It passed the
session's validation and a one-trial revalidation; the fresh stress trial fails it. And the kept sets' seed is not
computable from the session id alone."""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pytest

from peak_mcp.core.launch import parse_annotation
from peak_mcp.loop.context import session_seed
from peak_mcp.problems.declared import prelude
from peak_mcp.problems.shipped import get_problem
from peak_mcp.runner.messages import EvaluateJob
from tests.conftest import has_device

SEED, TRIALS, SIZES = 12345, 3, {"ROWS": 64, "COLS": 256}


def _kernel(bits: int) -> str:
    return prelude("hlsl", "f32") + f"""
// peak: entry=main groups=(cdiv(ROWS, 64), 1, 1)
struct Params {{ uint ROWS; uint COLS; }};
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<T> x;
[[vk::binding(1)]] RWStructuredBuffer<T> y;
[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID)
{{
    uint row = id.x;
    if (row >= p.ROWS) return;
    uint base = row * p.COLS;
    bool known = asuint(to_f32(x[0])) == {bits}u;
    float m = 0.0;
    if (known) {{ m = -3.402823466e38; for (uint c = 0; c < p.COLS; ++c) m = max(m, to_f32(x[base + c])); }}
    float sum = 0.0;
    for (uint c = 0; c < p.COLS; ++c) sum += exp(to_f32(x[base + c]) - m);
    for (uint c = 0; c < p.COLS; ++c) y[base + c] = from_f32(exp(to_f32(x[base + c]) - m) / sum);
}}
"""


@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")
def test_a_kernel_that_recognises_the_kept_stress_set_fails_the_fresh_revalidation() -> None:
    from peak_mcp.backends import hlsl
    from peak_mcp.problems.loading import allow_problem_code
    from peak_mcp.runner.jobs import evaluate, job_problem

    allow_problem_code()  # this test plays the worker, on the shipped softmax file only
    declaration = get_problem("softmax").declaration
    base = EvaluateJob(problem="softmax", declaration=declaration, dtype="f32", sizes=SIZES, source=None,
                       steps=["compile"], trials=TRIALS, seed=SEED)
    executor = hlsl.open_executor(0)
    try:
        problem = job_problem(executor, base, lambda _m: None)
        stress = problem.stress_inputs(SIZES, "f32", SEED + TRIALS - 1, np)  # the kept stress trial's set
        bits = struct.unpack("<I", np.asarray(stress["x"]).reshape(-1)[:1].astype(np.float32).tobytes())[0]
        source = _kernel(bits)
        spec = parse_annotation(source, needs=("entry", "groups"), symbols=("ROWS", "COLS"))
        job = base.model_copy(update={"source": source, "spec": spec, "steps": ["compile", "validate", "benchmark"],
                                      "vendor_ms": 1e9, "time_budget_s": 0.1, "min_reps": 3, "max_reps": 20})
        result = evaluate(executor, job, lambda _m: None)
        assert result.validation is not None and result.validation.passed  # it learned the kept sets
        assert result.revalidation is not None and result.revalidation.passed is False, result.revalidation
        assert result.revalidation.check == "nan_or_inf"
    finally:
        executor.close()


def test_the_kept_sets_seed_is_not_the_session_ids_hash() -> None:
    assert session_seed("abc") == session_seed("abc") != session_seed("abd")
    assert session_seed("abc") != int.from_bytes(hashlib.sha256(b"abc").digest()[:4], "big") % 2**31
