"""Problem traits (issue 33): built-in problems, problem files and KernelBench files say what kind of computation they
are, and the catalog's texts reach every problem that shares one of their traits: an imported LayerNorm gets the row
texts, a level-2 Gemm_Multiply_LeakyReLU the GEMM texts and epilogue fusion. KernelBench files are read unedited from
the mirror (skipped where it is absent); those tests need torch."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from peak_mcp.api.responses import whole_answer
from peak_mcp.catalog.transformations import Catalog, builtin_transformations_dir
from peak_mcp.core.errors import InvalidInput
from peak_mcp.problems.declared import DeclaredProblem
from peak_mcp.problems.registry import DescribeFailed, describe_in_subprocess
from peak_mcp.problems.traits import TRAITS, declared_traits, traits_of_ops
from tests.conftest import has_device

MIRROR = Path("/work/.mirror/ScalingIntelligence+KernelBench/repo")
SHIPPED = Catalog.load(builtin_transformations_dir())
ANYWHERE = {t.id for t in SHIPPED.list() if t.for_any_problem}


def texts(problem: str, traits: tuple[str, ...], backend: str | None = None) -> set[str]:
    """The texts a problem gets for its traits, the texts for any problem left out."""
    return {t.id for t in SHIPPED.list(backend=backend, problem=problem, traits=traits)} - ANYWHERE


def kernelbench(tmp_path: Path, level: str, name: str) -> Path:
    """A KernelBench file as published, copied out of the git mirror."""
    if not MIRROR.is_dir():
        pytest.skip("no KernelBench mirror on this machine")
    text = subprocess.run(["git", "-C", str(MIRROR), "show", f"HEAD:KernelBench/{level}/{name}"], check=True,
                          capture_output=True, text=True).stdout
    folder = tmp_path / "problems"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


# --- built-in problems and problem files -----------------------------------------------------------------------
def test_builtin_problems_declare_their_traits_and_get_their_texts() -> None:
    from peak_mcp.problems.shipped import get_problem

    assert get_problem("matmul").traits == ("gemm",)
    assert get_problem("softmax").traits == ("row_reduction", "softmax")
    assert get_problem("rmsnorm").traits == ("row_reduction", "normalization")
    assert get_problem("conv2d").traits == ("convolution",)
    assert get_problem("attention_causal").traits == ("attention",)
    from peak_mcp.loop.problem_files import problem_info

    assert problem_info(get_problem("softmax")).traits == ["row_reduction", "softmax"]  # list_problems says them
    assert {"online-softmax", "row-per-warp"} <= texts("softmax", get_problem("softmax").traits)
    assert "online-softmax" not in texts("row_sum", get_problem("row_sum").traits)  # softmax's own text
    assert "hopper-wgmma" not in texts("conv2d", ("convolution",))  # a GEMM-only text
    assert "register-blocking-2d" in texts("conv2d", ("convolution",))  # the GEMM behind an implicit GEMM


def test_a_problem_files_traits_come_from_its_declaration() -> None:
    """No TRAITS: derived from the flags and buffer shapes (a guess); TRAITS: taken, with what they imply."""
    gemv = declared_traits((), False, None, [("M", "K"), ("K",)], [("M",)])
    assert gemv == ("row_reduction", "gemv")
    assert declared_traits((), False, None, [("R", "C")], [("R",)]) == ("row_reduction",)
    assert declared_traits((), False, None, [("N",), ("N",)], [("N",)]) == ("elementwise",)
    assert declared_traits((), False, "C", [("R", "C")], [("R", "C")]) == ("row_reduction",)
    assert declared_traits((), False, None, [("N",), ("N",)], [()]) == ("row_reduction",)
    assert declared_traits((), True, "K", [("M", "K"), ("K", "N")], [("M", "N")]) == ("gemm",)
    assert declared_traits(("loss",), False, None, [("N",)], [()]) == ("row_reduction", "loss")
    assert {"row-per-warp", "warp-shuffle-reduction"} <= texts("matvec", gemv)
    assert not {"shared-memory-tiling", "tensor-cores"} & texts("matvec", gemv)  # GEMM tiling is no GEMV's


GEMV_FILE = '''"""y = A x."""
NAME = "matvec"
SIZES = {"M": 64, "K": 48}
INPUTS = {"A": ("M", "K"), "x": ("K",)}
OUTPUTS = {"y": ("M",)}
FLOPS = "2 * M * K"
TRAITS_LINE


def reference(A, x):
    return A @ x
'''


def test_define_problem_files_through_describe(tmp_path: Path) -> None:
    path = tmp_path / "matvec.py"
    path.write_text(GEMV_FILE.replace("TRAITS_LINE", ""))
    assert DeclaredProblem(describe_in_subprocess(path, timeout_s=60)).traits == ("row_reduction", "gemv")
    path.write_text(GEMV_FILE.replace("TRAITS_LINE", 'TRAITS = ("gemv", "fused_epilogue")'))
    declared = describe_in_subprocess(path, timeout_s=60)
    assert declared.traits == ("gemv", "fused_epilogue")
    assert DeclaredProblem(declared).traits == ("row_reduction", "gemv", "fused_epilogue")
    path.write_text(GEMV_FILE.replace("TRAITS_LINE", 'TRAITS = ("matvec",)'))
    with pytest.raises(DescribeFailed, match=r"TRAITS: unknown trait\(s\) \['matvec'\]"):
        describe_in_subprocess(path, timeout_s=60)


def test_ops_map_to_traits() -> None:
    assert traits_of_ops(["cumsum"], [(4, 8)], [(4, 8)]) == ("scan",)
    assert traits_of_ops(["addmm", "t", "mul*", "leaky_relu*"], [(4, 8)], [(4, 16)]) == ("gemm", "fused_epilogue")
    assert traits_of_ops(["mean", "pow*", "sub*"], [(4, 8), (4, 8)], [()]) == ("row_reduction", "loss")
    assert traits_of_ops(["amax", "sub*", "exp*", "sum", "div*"], [(4, 8)], [(4, 8)]) == ("row_reduction", "softmax")
    assert traits_of_ops(["bmm", "_softmax", "bmm"], [(2, 4, 8)] * 3, [(2, 4, 8)]) == (
        "row_reduction", "gemm", "attention", "softmax", "fused_epilogue")
    assert traits_of_ops(["view", "relu*"], [(4,)], [(4,)]) == ("elementwise",)
    assert traits_of_ops(["mv"], [(4, 8), (8, 1)], [(4, 1)]) == ("row_reduction", "gemv")
    assert traits_of_ops(["sort"], [(4,)], [(4,)]) == ()  # outside the vocabulary: the texts for any problem only


def test_every_catalog_trait_is_in_the_vocabulary() -> None:
    used = {trait for t in SHIPPED.list() for trait in t.traits} - {"any"}
    assert used <= set(TRAITS)
    # every trait a KernelBench level-1 problem has (the table in tools/kernelbench_catalog.py) has a text
    for trait in ("elementwise", "row_reduction", "scan", "gemm", "gemv", "convolution", "pooling", "attention",
                  "normalization", "softmax", "loss", "fused_epilogue"):
        assert texts("p", (trait, *{"gemv": ("row_reduction",), "loss": ("row_reduction",)}.get(trait, ()))), trait


# --- KernelBench files, as published ---------------------------------------------------------------------------
@pytest.mark.parametrize(("level", "name", "expected", "gets"), [
    ("level1", "89_cumsum.py", ("scan",), {"parallel-scan"}),
    ("level1", "40_LayerNorm.py", ("row_reduction", "normalization"), {"row-per-warp", "cache-eviction-hints"}),
    ("level2", "12_Gemm_Multiply_LeakyReLU.py", ("gemm", "fused_epilogue"), {"epilogue-fusion", "tensor-cores"}),
])
def test_kernelbench_traits_from_the_traced_forward(tmp_path: Path, level: str, name: str,
                                                     expected: tuple[str, ...], gets: set[str]) -> None:
    pytest.importorskip("torch")
    declared = describe_in_subprocess(kernelbench(tmp_path, level, name), timeout_s=120)
    problem = DeclaredProblem(declared)
    assert problem.traits == expected
    assert gets <= texts(problem.name, problem.traits)
    assert "online-softmax" not in texts(problem.name, problem.traits)


def test_a_refusal_names_the_traits_of_the_problem_and_of_the_text() -> None:
    with pytest.raises(InvalidInput) as raised:
        SHIPPED.resolve_for_session("hopper-wgmma", "cuda", "f32", None, problem="kb_40_layernorm",
                                    traits=("row_reduction", "normalization"))
    message = str(raised.value)
    assert "written for traits gemm" in message and "not kb_40_layernorm (traits row_reduction, normalization)" in \
        message, message
    assert SHIPPED.resolve_for_session("row-per-warp", "cuda", "f32", None, problem="kb_40_layernorm",
                                       traits=("row_reduction", "normalization")).id == "row-per-warp"


# --- over MCP ---------------------------------------------------------------------------------------------------
LAYERNORM_HLSL = """// peak: entry=main groups=(BATCH_SIZE, 1, 1)
struct Params { uint BATCH_SIZE; uint FEATURES; uint DIM1; uint DIM2; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] StructuredBuffer<float> w;
[[vk::binding(2)]] StructuredBuffer<float> b;
[[vk::binding(3)]] RWStructuredBuffer<float> y;
groupshared float red[64];
float group_sum(float v, uint t) {
    red[t] = v;
    GroupMemoryBarrierWithGroupSync();
    for (uint s = 32; s > 0; s >>= 1) {
        if (t < s) red[t] += red[t + s];
        GroupMemoryBarrierWithGroupSync();
    }
    float total = red[0];
    GroupMemoryBarrierWithGroupSync();
    return total;
}
[numthreads(64, 1, 1)]
void main(uint3 g : SV_GroupID, uint t : SV_GroupIndex) {
    uint n = p.FEATURES * p.DIM1 * p.DIM2, base = g.x * n;
    float s = 0.0;
    for (uint i = t; i < n; i += 64) s += x[base + i];
    float mean = group_sum(s, t) / n;
    float q = 0.0;
    for (uint j = t; j < n; j += 64) { float d = x[base + j] - mean; q += d * d; }
    float r = 1.0 / sqrt(group_sum(q, t) / n + 1e-5);
    for (uint k = t; k < n; k += 64) y[base + k] = (x[base + k] - mean) * r * w[k] + b[k];
}
"""


async def call(client: Any, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return whole_answer(tool, result)  # the long parts (source, ABI, ...) back from the text


@pytest.mark.anyio
@pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")
async def test_an_imported_layernorm_session_gets_the_row_texts_over_mcp(make_client, settings,
                                                                        tmp_path: Path) -> None:
    pytest.importorskip("torch")
    path = kernelbench(tmp_path, "level1", "40_LayerNorm.py")
    settings.problem_dirs = [path.parent]
    async with make_client() as (client, _):
        started = await call(client, "start_session", {
            "problem": "kb_40_layernorm", "backend": "hlsl", "dtype": "f32",
            "sizes": {"BATCH_SIZE": 2, "FEATURES": 4, "DIM1": 8, "DIM2": 8}})
        sid = started["session_id"]
        listed = await call(client, "list_transformations", {"session_id": sid})
        ids = {t["id"] for t in listed["transformations"]}
        assert {"hlsl-wave-reduction", "row-per-block-reduction"} <= ids, ids  # row texts written for rmsnorm
        assert not {"hlsl-groupshared-tiling", "online-softmax", "row-per-warp"} & ids  # GEMM, softmax, CUDA
        cuda = await call(client, "list_transformations", {"session_id": sid, "backend": "cuda"})
        assert "row-per-warp" in {t["id"] for t in cuda["transformations"]}
        text = await call(client, "get_transformation", {"transformation": "row-per-warp"})
        assert text["traits"] == ["row_reduction", "normalization", "softmax"]

        first = await call(client, "submit_kernel", {"session_id": sid, "source": LAYERNORM_HLSL})
        assert first["status"] == "benchmarked", first.get("message")
        step = await client.call_tool("apply_transformation", {"session_id": sid,
                                                               "transformation": "hlsl-wave-reduction"})
        assert not step.is_error, step.content[0].text
        refused = await client.call_tool("apply_transformation", {"session_id": sid,
                                                                  "transformation": "hlsl-groupshared-tiling"})
        assert refused.is_error
        said = refused.content[0].text
        assert "traits gemm" in said and "(traits row_reduction, normalization)" in said, said
