"""conv2d (peak_mcp/problems/builtin/conv2d.py): its declaration (derived output sizes P, Q; SAMPLES for stride,
padding, dilation and filter size), its reference against a direct float64 convolution at small sizes (hypothesis
over stride, padding and dilation), its error scale, and on a Vulkan device (lavapipe in CI) a real MCP session: the
naive kernel and the HLSL example pass at the session's and every sampled size, and the core hostile kernels are
each named by their failure. The SAMPLES extension of the problem format is tested here on a file of its own too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peak_mcp.api.responses import whole_answer
from peak_mcp.core.errors import InvalidInput
from peak_mcp.core.expressions import evaluate_condition
from peak_mcp.evaluation.generality import sample_sizes, satisfies
from peak_mcp.problems.declaration import ProblemDeclaration
from peak_mcp.problems.declared import DeclaredProblem
from peak_mcp.problems.loading import problem_code_allowed
from tests.conftest import has_device
from tests.hostile.harness import load_manifest, run_entry

ROOT = Path(__file__).resolve().parent.parent
FILE = ROOT / "peak_mcp" / "problems" / "builtin" / "conv2d.py"
VULKAN = pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")
SMALL = {"N": 2, "H": 9, "W": 7, "C": 5, "K": 7, "R": 3, "S": 3, "STRIDE": 1, "PAD": 1, "DIL": 1}


def declared(path: Path) -> DeclaredProblem:
    """The file read as the server reads it: through the confined describe subprocess."""
    out = subprocess.run([sys.executable, "-m", "peak_mcp.problems.describe", str(path)], capture_output=True,
                         text=True, timeout=120, check=False)
    reply = json.loads(out.stdout)
    assert "declaration" in reply, reply
    return DeclaredProblem(ProblemDeclaration.model_validate(reply["declaration"]))


@pytest.fixture(scope="module")
def conv() -> DeclaredProblem:
    return declared(FILE)


def direct(x: np.ndarray, w: np.ndarray, stride: int, pad: int, dil: int) -> np.ndarray:
    """The definition, one output element at a time, in float64."""
    n, h, wd, _ = x.shape
    k, r, s, _ = w.shape
    p = (h + 2 * pad - dil * (r - 1) - 1) // stride + 1
    q = (wd + 2 * pad - dil * (s - 1) - 1) // stride + 1
    y = np.zeros((n, p, q, k))
    for b, i, j, f in np.ndindex(n, p, q, k):
        for u, v in np.ndindex(r, s):
            hh, ww = i * stride - pad + u * dil, j * stride - pad + v * dil
            if 0 <= hh < h and 0 <= ww < wd:
                y[b, i, j, f] += float(np.dot(x[b, hh, ww, :], w[f, u, v, :]))
    return y


def test_the_declaration_derives_p_and_q_and_takes_the_resnet_layer_by_default(conv: DeclaredProblem) -> None:
    d = conv.declaration
    assert conv.default_sizes == {"N": 32, "H": 56, "W": 56, "C": 64, "K": 64, "R": 3, "S": 3, "STRIDE": 1,
                                  "PAD": 1, "DIL": 1}
    shapes = {a.name: a.shape(conv.default_sizes) for a in conv.arguments("f32") if hasattr(a, "is_output")}
    assert shapes == {"x": (32, 56, 56, 64), "w": (64, 3, 3, 64), "y": (32, 56, 56, 64)}
    strided = {**conv.default_sizes, "STRIDE": 2, "H": 57, "W": 30, "PAD": 0, "DIL": 2}
    y = next(a for a in conv.arguments("f32") if a.name == "y")
    assert y.shape(strided) == (32, (57 - 4 - 1) // 2 + 1, (30 - 4 - 1) // 2 + 1, 64)
    scalars = [a.name for a in conv.arguments("f32") if not hasattr(a, "is_output")]
    assert scalars == [*conv.default_sizes, "P", "Q"]
    assert conv.flops(conv.default_sizes) == 2 * 32 * 56 * 56 * 64 * 64 * 9
    assert conv.reduction_length(conv.default_sizes) == 64 * 9 and d.batch == "N"
    assert "int STRIDE, int PAD, int DIL, int P, int Q)" in conv.abi("cuda", "f16")
    assert set(conv.naive_backends) == {"cuda", "hip", "hlsl"}
    # TENSOR_CORES: 16-bit kernels are judged against the tensor-core peak, f32 ones against FMA (or 3xTF32).
    peaks = {"fp32": 66.9, "tf32_tensor": 494.7, "fp16_tensor": 989.4, "bf16_tensor": 989.4}
    assert [conv.peak_path(d) for d in ("f32", "f16", "bf16")] == ["fp32", "fp16_tensor", "bf16_tensor"]
    assert conv.speed_limit("f16", peaks) == 989.4 and conv.speed_limit("f32", peaks) == 494.7 / 3


def test_the_abi_carries_the_whole_definition_and_names_p_and_q(conv: DeclaredProblem) -> None:
    """The agent writes its first kernel from this text: the docstring's first paragraph (not its first line,
    which stopped at `sum over r, s, c of`), y's extents as P and Q with their expressions, which the annotation
    may name too."""
    for backend in ("cuda", "hlsl"):
        abi = conv.abi(backend, "f32")
        first = abi.splitlines()[0]
        assert "x[n, p*STRIDE - PAD + r*DIL, q*STRIDE - PAD + s*DIL, c] * w[k, r, s, c]" in first
        assert "positions outside x read as 0" in first
        assert "y: N x P x Q x K (P = (H + 2 * PAD - DIL * (R - 1) - 1) // STRIDE + 1; Q = " in abi
        assert "passed as scalars, and usable in the annotation's expressions" in abi
    assert "y (float, N×P×Q×K, read-write)" in conv.abi("hlsl", "f32")
    assert "Sizes need not be multiples of any tile unless the session says so." in conv.abi("hlsl", "f32")


def test_padding_may_be_zero_and_a_filter_past_the_padded_image_is_refused(conv: DeclaredProblem) -> None:
    assert conv.check_sizes({"R": 1, "S": 1, "PAD": 0})["PAD"] == 0  # a 1x1 layer
    with pytest.raises(InvalidInput, match="positive integer"):
        conv.check_sizes({"STRIDE": 0})
    with pytest.raises(InvalidInput, match="constraint"):
        conv.check_sizes({"H": 2, "PAD": 0, "R": 3})


def test_generality_varies_the_parameters_within_the_constraints_and_the_budget(conv: DeclaredProblem) -> None:
    sampled = sample_sizes(conv, SMALL, [])
    assert len(sampled) >= 10
    for sizes in sampled:
        assert all(evaluate_condition(c, sizes) for c in conv.declaration.constraints), sizes
        assert conv.work(sizes) <= 2**27
        for symbol, values in conv.declaration.samples.items():
            assert sizes[symbol] in values or sizes[symbol] == SMALL[symbol], (symbol, sizes)
    seen = {symbol: {s[symbol] for s in sampled} for symbol in ("R", "S", "STRIDE", "PAD", "DIL")}
    assert seen["STRIDE"] == {1, 2, 3} and seen["PAD"] == {0, 1, 2} and seen["DIL"] == {1, 2}
    assert {1, 2, 3, 5} <= seen["R"] and any(s["R"] != s["S"] for s in sampled)
    assert any(s["C"] > 32 and s["C"] % 2 for s in sampled)  # past a 32-channel tile, odd
    # A session that fixes its parameters gets only sizes with them.
    fixed = sample_sizes(conv, SMALL, ["STRIDE == 1", "PAD == 1", "R == 3", "S == 3", "DIL == 1"])
    assert len(fixed) >= 6 and all(satisfies(s, ["STRIDE == 1 and PAD == 1 and R == 3 and S == 3"]) for s in fixed)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 2), h=st.integers(1, 7), wd=st.integers(1, 7), c=st.integers(1, 4), k=st.integers(1, 3),
       r=st.sampled_from([1, 2, 3]), s=st.sampled_from([1, 3]), stride=st.integers(1, 3), pad=st.integers(0, 2),
       dil=st.integers(1, 2), seed=st.integers(0, 2**16))
def test_the_reference_is_the_direct_convolution(conv: DeclaredProblem, n: int, h: int, wd: int, c: int, k: int,
                                                 r: int, s: int, stride: int, pad: int, dil: int, seed: int) -> None:
    sizes = {"N": n, "H": h, "W": wd, "C": c, "K": k, "R": r, "S": s, "STRIDE": stride, "PAD": pad, "DIL": dil}
    if h + 2 * pad < dil * (r - 1) + 1 or wd + 2 * pad < dil * (s - 1) + 1:
        with pytest.raises(InvalidInput):
            conv.check_sizes(sizes)
        return
    with problem_code_allowed():
        inputs = conv.make_inputs(sizes, "f32", seed, np)
        refs = conv.reference(inputs, sizes, "f32", seed, float("inf"), np)
    x = inputs["x"].astype(np.float64).reshape(n, h, wd, c)
    w = inputs["w"].astype(np.float64).reshape(k, r, s, c)
    want = direct(x, w, stride, pad, dil)
    y = refs["y"]
    np.testing.assert_allclose(y.values.reshape(want.shape), want, rtol=1e-12, atol=1e-12)
    # The error scale is conv(|x|, |w|): at least |y| everywhere, so a correct f32 sum is inside its bound.
    bound = y.scale.reshape(want.shape)
    assert np.all(bound >= np.abs(want) - 1e-12)


def test_the_bound_takes_an_f32_sum_in_any_order_and_not_a_half_one(conv: DeclaredProblem) -> None:
    sizes = {"N": 2, "H": 6, "W": 5, "C": 64, "K": 8, "R": 3, "S": 3, "STRIDE": 1, "PAD": 1, "DIL": 1}
    with problem_code_allowed():
        inputs = conv.make_inputs(sizes, "f32", 3, np)
        ref = conv.reference(inputs, sizes, "f32", 3, float("inf"), np)["y"]
    tol = conv.tolerance("f32")
    bound = tol.elementwise * ref.scale.reshape(-1)
    x = inputs["x"].reshape(2, 6, 5, 64)
    w = inputs["w"].reshape(8, 3, 3, 64)
    # Term by term, tap-major and channels backwards (not the reference's order): in f32 and in f16.
    f32 = np.zeros((2, 6, 5, 8), dtype=np.float32)
    half = np.zeros((2, 6, 5, 8), dtype=np.float16)
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0))).astype(np.float32)
    for u, v in np.ndindex(3, 3):
        for ch in reversed(range(64)):
            term = padded[:, u:u + 6, v:v + 5, ch, None] * w[None, :, u, v, ch].astype(np.float32)
            f32 += term.astype(np.float32)
            half = (half + term.astype(np.float16)).astype(np.float16)
    values = ref.values.reshape(-1)
    assert np.all(np.abs(f32.reshape(-1) - values) <= bound)
    assert np.max(np.abs(half.reshape(-1).astype(np.float64) - values) / bound) > 10


SAMPLED_FILE = '''
"""Shift: y[i] = x[i + OFF], a parameter OFF that may be 0."""
NAME = "shift_sampled"
SIZES = {"N": 64, "OFF": 2}
INPUTS = {"x": ("N + OFF",)}
OUTPUTS = {"y": ("N",)}
SAMPLES = {"OFF": (0, 1, 3)}


def reference(x, *, OFF):
    return x[OFF:]
'''


def test_generality_reaches_the_16_byte_fast_path_with_ragged_pixels(conv: DeclaredProblem) -> None:
    """Every awkward size has odd channel counts, which send a TMA or vector fast path (C % 8 == 0) to its fallback:
    two more sizes keep the rows in whole 16-byte chunks (the session's C and K, then 72 and 40) at the session's
    filter, stride and padding, with few, odd pixels (P, Q not multiples of 8)."""
    sampled = conv.generality_sizes(conv.default_sizes)
    pitched = [s for s in sampled if s["C"] % 8 == 0 and s["K"] % 8 == 0]
    session = {k: conv.default_sizes[k] for k in ("R", "S", "STRIDE", "PAD", "DIL")}
    assert [(s["C"], s["K"]) for s in pitched] == [(64, 64), (72, 40), (64, 64)]
    for s in pitched[:2]:
        assert {k: s[k] for k in session} == session and s["H"] % 8 and s["W"] % 8 and s["N"] > 1
    long_row = pitched[2]  # the session's channels, one long odd row of pixels
    assert {k: long_row[k] for k in session} == session and long_row["W"] % 2 and long_row["W"] > 56


def test_samples_is_general_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "shift.py"
    path.write_text(textwrap.dedent(SAMPLED_FILE).lstrip())
    problem = declared(path)
    assert problem.sampled == {"OFF": (0, 1, 3)} and problem.check_sizes({"OFF": 0})["OFF"] == 0
    sampled = problem.generality_sizes(problem.default_sizes)
    # the listed values in turn; the candidates with 16-byte rows keep the session's (2)
    assert {s["OFF"] for s in sampled} == {0, 1, 2, 3}
    assert {s["N"] for s in sampled} >= {1, 7, 100, 1031}  # N still gets the awkward extents
    assert all(len(group) == 0 for group in problem.sizes_above(problem.default_sizes)[1:])  # none for OFF
    base = json.loads(ProblemDeclaration.model_validate(
        {**problem.declaration.model_dump(mode="json")}).model_dump_json())
    for samples, why in (({"M": [1]}, "not a size symbol"), ({"OFF": [1, 1]}, "distinct"),
                         ({"OFF": [65]}, "from 0 to 64")):
        with pytest.raises(ValueError, match=why):
            ProblemDeclaration.model_validate({**base, "samples": samples})
    with pytest.raises(ValueError, match="non-negative"):
        ProblemDeclaration.model_validate({**base, "sizes": {"N": 64, "OFF": -1}})
    with pytest.raises(ValueError, match="positive"):
        ProblemDeclaration.model_validate({**base, "sizes": {"N": 64, "OFF": 0}, "samples": {"OFF": [1, 2]}})


async def call(client: Any, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return whole_answer(tool, result)  # the long parts (source, ABI, ...) back from the text


@VULKAN
@pytest.mark.anyio
@pytest.mark.parametrize("dtype", ["f32", "f16"])
async def test_a_conv2d_session_on_vulkan(make_client, dtype: str) -> None:
    async with make_client() as (client, _):
        listed = {p["name"]: p for p in (await call(client, "list_problems", {}))["problems"]}
        assert "conv2d" in listed and listed["conv2d"]["dtypes_by_backend"]["hlsl"] == ["f32", "f16"]
        session = await call(client, "start_session", {"problem": "conv2d", "backend": "hlsl", "dtype": dtype,
                                                       "sizes": SMALL})
        sid, v0 = session["session_id"], session["version_0"]
        assert v0["status"] == "benchmarked", v0["message"]
        assert v0["generality"]["passed"] is True and len(v0["generality"]["sizes_checked"]) >= 10
        example = (ROOT / "examples" / "conv2d" / "hlsl" / "1_k_blocked.hlsl").read_text()
        if dtype == "f16":
            example = example.replace("typedef float T;", "typedef half T;", 1)
        report = await call(client, "submit_kernel", {"session_id": sid, "parent": 0, "source": example})
        assert report["status"] == "benchmarked" and report["generality"]["passed"] is True, report["message"]
        if dtype != "f32":
            return
        entries = load_manifest("hlsl", "conv2d")
        assert {e.cls for e in entries} >= {"padding_mishandled", "oob_read_padding", "unwritten_last_filter",
                                            "last_channel_dropped", "lose_precision_half_accumulate"}
        for entry in entries:
            outcome = await run_entry(client, sid, entry, SMALL, entry.file)
            assert outcome.ok, f"{entry.file}: {outcome.why()}"


LADDER = sorted((ROOT / "examples" / "conv2d" / "cuda").glob("*.cu"))


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("path", LADDER, ids=lambda p: p.stem)
def test_the_cuda_ladder_compiles_without_spills(conv: DeclaredProblem, path: Path, dtype: str) -> None:
    """Each step builds with NVRTC for sm_90a in every dtype it serves (the tensor-core steps: f16 and bf16; f32
    stops at their static_assert), with the problem's symbols in its launch line."""
    from peak_mcp.backends import cuda as cuda_backend
    from peak_mcp.backends.base import CompileFailed
    from peak_mcp.backends.registry import launch_spec
    from peak_mcp.problems.declared import C_TYPE

    source = path.read_text()
    assert source.count("typedef float T;") == 1
    source = source.replace("typedef float T;", f"typedef {C_TYPE['cuda'][dtype]} T;", 1)
    spec = launch_spec(source, "cuda", conv.symbols, conv.derived)
    executor = cuda_backend.CudaExecutor(None, arch="sm_90a")
    if dtype == "f32" and "static_assert(sizeof(T) == 2" in source:
        with pytest.raises(CompileFailed, match="f16 and bf16 sessions only"):
            executor.compile(source, spec)
        return
    resources = executor.compile(source, spec).resources
    assert resources.get("spill_store_bytes", 0) == 0 and resources.get("stack_frame_bytes", 0) == 0, resources


@pytest.mark.parametrize("backend", ["cuda", "hip"])
def test_the_naive_kernel_compiles_for_cuda_and_hip(conv: DeclaredProblem, backend: str) -> None:
    from peak_mcp.backends import cuda as cuda_backend
    from peak_mcp.backends import hip as hip_backend
    from peak_mcp.backends.registry import launch_spec

    executor = cuda_backend.CudaExecutor(None, arch="sm_90a") if backend == "cuda" else \
        hip_backend.open_executor(None, hip_arch="sm_90a")
    for dtype in conv.dtypes:
        source = conv.naive_kernel(backend, dtype)
        spec = launch_spec(source, backend, conv.symbols, conv.derived)
        assert executor.compile(source, spec).resources["registers"] > 0


def test_the_mma_step_tunes_its_tile_and_has_a_text(conv: DeclaredProblem) -> None:
    """Step 5 (mma.sync from swizzled shared memory): its tile and stage choices are tuning parameters whose defaults
    are the file's own #defines, every configuration fits an H100 block's shared memory at the ResNet layer, and its
    catalog text parses and follows step 4's."""
    import re

    from peak_mcp.backends.registry import launch_spec
    from peak_mcp.catalog.transformations import Catalog, builtin_transformations_dir

    source = (ROOT / "examples" / "conv2d" / "cuda" / "5_mma_swizzled.cu").read_text()
    spec = launch_spec(source, "cuda", conv.symbols, conv.derived)
    assert spec.params == {"BM": [128, 256], "STAGES": [3, 4, 2]}
    for name, values in spec.params.items():
        assert re.search(rf"#ifndef {name}\n#define {name} {values[0]}\n", source)
    for bm in spec.params["BM"]:
        for stages in spec.params["STAGES"]:
            config = {"BM": bm, "STAGES": stages}
            launch = spec.evaluate(conv.default_sizes, config)
            assert launch["block"] == (bm, 1, 1) and launch["grid"] == (-(-32 * 56 * 56 // bm), 1, 1)
            assert launch["shared"] <= 227 * 1024 and spec.violated(conv.default_sizes, config) is None
    text = Catalog.load(builtin_transformations_dir()).get("conv-mma-swizzled")
    assert text.after == ["conv-filter-specialization"] and "ldmatrix" in text.body and "convolution" in text.traits


def test_the_annotation_may_use_p_and_q(conv: DeclaredProblem) -> None:
    """P and Q are scalars the problem derives from the sizes: a launch line may name them, and they mean their
    expressions (the agent's session wrote them out twice per kernel); a tuning parameter may not take the name."""
    from peak_mcp.backends.registry import launch_spec
    from peak_mcp.core.errors import AnnotationError

    assert set(conv.derived) == {"P", "Q"}
    short = "// peak: entry=k grid=(cdiv(N * P * Q, 128), cdiv(K, 64), 1) block=(256, 1, 1) shared=0\n"
    written = ("// peak: entry=k grid=(cdiv(N * ((H + 2 * PAD - DIL * (R - 1) - 1) // STRIDE + 1) * ((W + 2 * PAD - "
               "DIL * (S - 1) - 1) // STRIDE + 1), 128), cdiv(K, 64), 1) block=(256, 1, 1) shared=0\n")
    sizes = {**SMALL, "H": 56, "W": 41, "STRIDE": 2, "PAD": 2, "DIL": 2, "R": 5, "S": 3}
    geometry = launch_spec(short, "cuda", conv.symbols, conv.derived).evaluate(sizes)
    assert geometry == launch_spec(written, "cuda", conv.symbols).evaluate(sizes)
    assert "P" in conv.abi("cuda", "f32") and "usable in the annotation" in conv.abi("cuda", "f32")
    many = "// peak: entry=k grid=(cdiv(N * P * Q, 128), cdiv(K, 64), max(P, Q, P + Q, P * Q, P - Q + P)) " \
           "block=(256, 1, 1) shared=0\n"  # short as written, over 400 characters written out
    assert launch_spec(many, "cuda", conv.symbols, conv.derived).evaluate(sizes)["grid"][2] > 0
    with pytest.raises(AnnotationError, match="derives from the sizes"):
        launch_spec(short + "// peak: params P=[1, 2]\n", "cuda", conv.symbols, conv.derived)


def test_the_hopper_step_keeps_its_wgmmas_pipelined_its_maps_general_and_has_a_text(conv: DeclaredProblem) -> None:
    """Step 6 (TMA boxes of x shifted per tap, wgmma, TMA stores of y): ptxas keeps its wgmmas pipelined (no C7515
    serialization warning), its maps are 4-D over x and w with the box a column of taps needs and over y with a
    patch's box, zero (unencodable) where C % 8 != 0 so the kernel must take its step-5 fallback there (and y's where
    K % 8 != 0, for its register epilogue), its grid is persistent and its stages fit an H100 block;
    its catalog text parses and follows step 5's."""
    from peak_mcp.backends import cuda as cuda_backend
    from peak_mcp.backends.registry import launch_spec
    from peak_mcp.backends.tensor_maps import requests
    from peak_mcp.catalog.transformations import Catalog, builtin_transformations_dir

    source = (ROOT / "examples" / "conv2d" / "cuda" / "6_hopper_tma_wgmma.cu").read_text()
    source = source.replace("typedef float T;", "typedef __half T;", 1)
    spec = launch_spec(source, "cuda", conv.symbols, conv.derived)
    assert "C7515" not in cuda_backend.CudaExecutor(None, arch="sm_90a").compile(source, spec).log
    sizes = conv.default_sizes
    maps = requests(spec, conv, "f16", sizes)
    assert [(m.buffer, m.shape, m.box, m.unencodable) for m in maps] == [
        ("x", (32, 56, 56, 64), (1, 10, 8, 64), None), ("w", (64, 3, 3, 64), (64, 1, 1, 64), None),
        ("y", (32, 56, 56, 64), (1, 8, 8, 64), None)]
    one = requests(spec, conv, "f16", {**sizes, "C": 256, "R": 1, "S": 1, "PAD": 0})
    assert [m.box for m in one] == [(1, 8, 8, 64), (64, 1, 1, 64), (1, 8, 8, 64)]
    # C % 8 != 0: x and w unencodable (the step-5 fallback); K % 8 != 0: y's (the epilogue stores from registers)
    assert [bool(m.unencodable) for m in requests(spec, conv, "f16", {**sizes, "C": 5})] == [True, True, False]
    assert [bool(m.unencodable) for m in requests(spec, conv, "f16", {**sizes, "K": 5})] == [False, False, True]
    assert spec.params == {"PPW": [1, 2], "WRES": [98304, 0]}
    launch = spec.on_device(132).evaluate(sizes)
    assert launch["grid"] == (132, 1, 1) and launch["block"] == (384, 1, 1) and launch["shared"] <= 227 * 1024
    text = Catalog.load(builtin_transformations_dir()).get("conv-hopper-tma-wgmma")
    assert "conv-mma-swizzled" in text.after and "tma_load_4d" in text.body and "convolution" in text.traits
