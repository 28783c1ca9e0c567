"""SM_COUNT in launch expressions: the session's device's multiprocessor count, for persistent grids."""

from __future__ import annotations

import pytest

from peak_mcp.core.errors import AnnotationError
from peak_mcp.core.expressions import evaluate_condition
from peak_mcp.core.launch import parse_annotation

CUDA = ("entry", "grid", "block")
MATMUL = ("M", "N", "K")
PERSISTENT = "// peak: entry=k grid=(min(SM_COUNT, cdiv(M, 128) * cdiv(N, 128)), 1, 1) block=(128, 1, 1) shared=0\n"
SIZES = {"M": 2048, "N": 2048, "K": 64}  # 256 output tiles

# One thread per element of C, striding by the whole grid: right for any grid, so SM_COUNT only spreads the work.
GRID_STRIDE = """// peak: entry=mm grid=(min(SM_COUNT * 4, cdiv(M * N, 256)), 1, 1) block=(256, 1, 1) shared=0
extern "C" __global__ void mm(const float* A, const float* B, float* C, int M, int N, int K)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (long long)M * N;
         i += (long long)gridDim.x * blockDim.x) {
        int row = (int)(i / N), col = (int)(i % N);
        float acc = 0.0f;
        for (int k = 0; k < K; ++k)
            acc += A[(long long)row * K + k] * B[(long long)k * N + col];
        C[i] = acc;
    }
}
"""


def test_sm_count_is_the_bound_devices() -> None:
    spec = parse_annotation(PERSISTENT, needs=CUDA, symbols=MATMUL)
    assert spec.on_device(132).evaluate(SIZES)["grid"] == (132, 1, 1)
    assert spec.on_device(304).evaluate(SIZES)["grid"] == (256, 1, 1)  # never more blocks than tiles
    assert spec.on_device(None).evaluate(SIZES)["grid"] == (1, 1, 1)  # not reported: one block strides over all
    with pytest.raises(AnnotationError, match="bound to a session's device"):
        spec.evaluate(SIZES)


def test_a_parameter_cannot_take_the_name() -> None:
    with pytest.raises(AnnotationError, match="multiprocessor count"):
        parse_annotation(PERSISTENT + "// peak: params SM_COUNT=[1, 2]\n", needs=CUDA, symbols=MATMUL)


@pytest.mark.anyio
async def test_a_session_binds_its_device(make_client) -> None:
    """Compile-only here (the grid is evaluated at submit time and must not be refused); on a GPU the grid-stride
    kernel validates at every sampled size with the device's own count."""
    async with make_client() as (client, service):
        started = await client.call_tool("start_session", {"backend": "cuda", "dtype": "f32",
                                                           "sizes": {"M": 96, "N": 80, "K": 40}})
        assert not started.is_error, started.content[0].text
        sid = started.structured_content["session_id"]
        submitted = await client.call_tool("submit_kernel", {"session_id": sid, "source": GRID_STRIDE})
        report = submitted.structured_content
        if service.store.session(sid).runs:
            assert report["status"] == "benchmarked", report
            assert report["generality"]["passed"], report["generality"]
        else:
            assert report["status"] == "compiled", report


def test_a_where_on_sm_count_is_left_to_the_device() -> None:
    """At parse time SM_COUNT is a stand-in (132): a condition on it is the device's to judge, as one on the sizes
    is theirs, so it does not refuse the default configuration."""
    spec = parse_annotation(PERSISTENT.replace("128, 1, 1", "BM, 1, 1", 1) + "// peak: params BM=[256, 128]\n"
                            "// peak: where=BM <= SM_COUNT\n", needs=CUDA, symbols=MATMUL)
    assert spec.on_device(304).violated(SIZES) is None
    assert spec.on_device(132).violated(SIZES) == "BM <= SM_COUNT"


def test_a_defined_problem_cannot_take_the_name() -> None:
    """A size symbol SM_COUNT lost silently to the device's count in every launch expression (grid too small, a
    false unwritten_output); a scalar SM_COUNT would hide the device's."""
    from peak_mcp.problems.declaration import ProblemDeclaration

    base = {"name": "copy", "title": "copy", "sizes": {"N": 64}, "dtypes": ["f32"],
            "inputs": [{"name": "x", "shape": ["N"]}], "outputs": [{"name": "y", "shape": ["N"]}],
            "scalars": [{"name": "N", "expr": "N"}], "flops": "N", "path": "copy.py", "sha256": "0" * 64}
    ProblemDeclaration.model_validate(base)
    with pytest.raises(ValueError, match="not a usable identifier"):
        ProblemDeclaration.model_validate({**base, "sizes": {"SM_COUNT": 64},
                                           "inputs": [{"name": "x", "shape": ["SM_COUNT"]}],
                                           "outputs": [{"name": "y", "shape": ["SM_COUNT"]}],
                                           "scalars": [{"name": "SM_COUNT", "expr": "SM_COUNT"}],
                                           "flops": "SM_COUNT"})
    with pytest.raises(ValueError, match="not a usable identifier"):
        ProblemDeclaration.model_validate({**base, "scalars": [{"name": "SM_COUNT", "expr": "N"}]})


def test_a_deeply_nested_where_is_refused_in_words() -> None:
    """1,600 characters of `- - - 1` overflowed the interpreter's recursion: an internal error, not a refusal,
    and the submitted version stayed pending. As written, a condition is held to 800 characters; with derived
    names written out it may be longer, and depth is then what refuses it."""
    source = PERSISTENT + "// peak: params BM=[1, 2]\n// peak: where=" + "-" * 1590 + "1 < 2\n"
    with pytest.raises(AnnotationError, match="longer than 800 characters"):
        parse_annotation(source, needs=CUDA, symbols=MATMUL)
    with pytest.raises(AnnotationError, match="nested too deeply"):
        evaluate_condition("-" * 1590 + "1 < 2", {}, derived_out=True)


def test_a_long_run_of_signs_in_a_value_list_is_read() -> None:
    spec = parse_annotation(PERSISTENT + "// peak: params BM=[" + "-" * 1990 + "3, 1]\n", needs=CUDA,
                            symbols=MATMUL)
    assert spec.params["BM"] == [3, 1]
