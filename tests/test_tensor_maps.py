"""The tensor_map / cluster ABI (peak_mcp/backends/tensor_maps.py): parsing, what the server encodes and refuses,
and on a Hopper GPU a TMA kernel through an in-process MCP client (the GPU tests skip elsewhere)."""

from __future__ import annotations

import pytest

from peak_mcp.backends.cuda import CudaExecutor
from peak_mcp.backends.tensor_maps import launch_geometry, requests, unencodable_note
from peak_mcp.core.errors import AnnotationError
from peak_mcp.core.launch import parse_annotation, with_params
from peak_mcp.problems.shipped import get_problem
from tests.conftest import ROOT, has_device, probe, skip_reason

TMA_TILED = (ROOT / "tests" / "data" / "tma" / "tma_tiled.cu").read_text()
CUDA = ("entry", "grid", "block")
MATMUL = ("M", "N", "K")
HEAD = "// peak: entry=k grid=(cdiv(N, 128), cdiv(M, 128), 1) block=(128, 1, 1) shared=0\n"


def _spec(lines: str, needs: tuple[str, ...] = CUDA):
    return parse_annotation(HEAD + lines, needs=needs, symbols=MATMUL)


def test_lines_parse_in_order_with_defaults() -> None:
    spec = _spec("// peak: params BK=[64, 32]\n// peak: tensor_map B box=(BK, 64)\n"
                 "// peak: tensor_map A box=(128, BK) swizzle=64\n")
    assert [(m.buffer, m.box, m.swizzle) for m in spec.tensor_maps] == [("B", ("BK", "64"), 128),
                                                                       ("A", ("128", "BK"), 64)]
    assert spec.boxes({"M": 256, "N": 256, "K": 256}, {"BK": 32}) == [(32, 64), (128, 32)]


@pytest.mark.parametrize(("line", "words"), [
    ("// peak: tensor_map A box=(64, 64) swizzle=100", "swizzle=100"),
    ("// peak: tensor_map A box=(64, 64) pitch=3", "pitch"),
    ("// peak: tensor_map A swizzle=128", "box"),
    ("// peak: tensor_map A box=64", "parenthesized"),
    ("// peak: tensor_map A box=(1, 2, 3, 4, 5, 6)", "1 to 5"),
    ("// peak: tensor_map A box=(64, Q)", "Q"),
])
def test_malformed_lines_are_refused_with_their_line(line: str, words: str) -> None:
    with pytest.raises(AnnotationError) as caught:
        _spec(line + "\n")
    assert words in str(caught.value) and "line 2" in str(caught.value)


def test_hlsl_has_no_tensor_maps_or_clusters() -> None:
    with pytest.raises(AnnotationError, match="CUDA"):
        parse_annotation("// peak: entry=main groups=(1, 1, 1)\n// peak: tensor_map A box=(8, 8)\n",
                         needs=("entry", "groups"), symbols=MATMUL)
    with pytest.raises(AnnotationError, match="cluster"):
        parse_annotation("// peak: entry=main groups=(1, 1, 1) cluster=(2, 1, 1)\n", needs=("entry", "groups"),
                         symbols=MATMUL)


def test_grid_must_be_whole_clusters() -> None:
    spec = parse_annotation("// peak: entry=k grid=(cdiv(N, 128), 1, 1) block=(128, 1, 1) cluster=(2, 1, 1)\n",
                            needs=CUDA, symbols=MATMUL)
    assert spec.evaluate({"M": 1, "N": 512, "K": 1})["cluster"] == (2, 1, 1)
    with pytest.raises(AnnotationError, match="whole number of clusters"):
        spec.evaluate({"M": 1, "N": 384, "K": 1})


def test_requests_take_shape_and_type_from_the_problem() -> None:
    spec = _spec("// peak: tensor_map B box=(64, 64)\n// peak: tensor_map A box=(128, 64)\n")
    maps = requests(spec, get_problem("matmul"), "bf16", {"M": 300, "N": 1024, "K": 4096})
    b, a = maps
    assert (b.buffer, b.index, b.dtype, b.shape, b.strides) == ("B", 1, "bf16", (4096, 1024), (2048,))
    assert (a.index, a.shape, a.box, a.strides, a.unencodable) == (0, (300, 4096), (128, 64), (8192,), None)


def test_a_pitch_tma_cannot_describe_gets_zeros_and_a_reason() -> None:
    spec = _spec("// peak: tensor_map A box=(128, 64)\n")
    geometry = launch_geometry(spec, get_problem("matmul"), "bf16", {"M": 256, "N": 256, "K": 77})
    [a] = geometry["tensor_maps"]
    assert "154 bytes" in a.unencodable
    assert "zeros" in unencodable_note(geometry) and "154 bytes" in unencodable_note(geometry)
    assert unencodable_note(launch_geometry(spec, get_problem("matmul"), "bf16", {"M": 8, "N": 8, "K": 64})) is None


@pytest.mark.parametrize(("line", "words"), [
    ("// peak: tensor_map X box=(64, 64)", "no buffer"),
    ("// peak: tensor_map A box=(64, 64, 1)", "2 dimensions"),
    ("// peak: tensor_map A box=(64, 128)", "swizzle span"),  # 256 bytes of bf16 under a 128-byte swizzle
    ("// peak: tensor_map A box=(512, 64)", "1 to 256"),
    ("// peak: tensor_map A box=(64, 4) swizzle=0", "16-byte"),
])
def test_boxes_the_hardware_cannot_take_are_refused(line: str, words: str) -> None:
    with pytest.raises(AnnotationError, match=words):
        requests(_spec(line + "\n"), get_problem("matmul"), "bf16", {"M": 256, "N": 256, "K": 256})


def test_a_tma_kernel_compiles_with_its_maps_after_the_scalars() -> None:
    spec = parse_annotation(TMA_TILED, needs=CUDA, symbols=MATMUL)
    compiled = CudaExecutor(None).build(with_params(TMA_TILED, spec.config()), spec)
    assert compiled.binary and compiled.resources["registers"] > 0


def _hopper() -> bool:
    devices = probe().get("cuda", {}).get("devices", [])
    return has_device("cuda") and any(float(d["properties"].get("compute_capability", "0")) >= 9.0 for d in devices)


def hopper_gpu(test):
    """A test that needs a GPU with TMA and clusters (compute capability 9.0 or newer)."""
    reason = f"no CUDA GPU of compute capability 9.0: {skip_reason('cuda')}"
    return pytest.mark.gpu(pytest.mark.anyio(pytest.mark.skipif(not _hopper(), reason=reason)(test)))


SIZES = {"M": 515, "N": 260, "K": 132}  # row pitches that TMA takes (f32: multiples of 4), edges that are not tiles


async def _session(client, dtype: str = "f32") -> str:
    started = await client.call_tool("start_session", {"backend": "cuda", "dtype": dtype, "sizes": SIZES})
    assert not started.is_error, started.content[0].text
    return started.structured_content["session_id"]


async def _submit(client, session_id: str, source: str) -> dict:
    result = await client.call_tool("submit_kernel", {"session_id": session_id, "source": source})
    assert not result.is_error, result.content[0].text
    return result.structured_content


@pytest.mark.parametrize("cluster", [1, 2])
@hopper_gpu
async def test_tma_kernel_validates_at_every_size(make_client, cluster: int) -> None:
    source = TMA_TILED.replace("CLUSTER=[1, 2]", f"CLUSTER=[{cluster}, {3 - cluster}]")
    async with make_client() as (client, _):
        report = await _submit(client, await _session(client), source)
        assert report["status"] == "benchmarked", report["message"]
        assert report["generality"]["passed"], report["generality"]  # awkward sizes take the plain path


@hopper_gpu
async def test_a_kernel_that_uses_a_zero_map_is_told_why(make_client) -> None:
    always = TMA_TILED.replace("const bool tma = (K % 4 == 0) && (N % 4 == 0);", "const bool tma = true;")
    async with make_client() as (client, _):
        report = await _submit(client, await _session(client), always)
        # validation's smallest size (1 x 1 x 1) already has pitches TMA cannot take
        assert (report["status"], report["failure"]) == ("failed", "kernel_fault"), report["message"]
        assert "tensor map of zeros" in report["message"] and "4 bytes" in report["message"], report["message"]


def test_a_launch_fault_names_a_zero_map_and_refused_input_passes_unchanged() -> None:
    from peak_mcp.backends.base import KernelFault
    from peak_mcp.backends.cuda import _launch_error
    from peak_mcp.core.errors import InvalidInput

    geometry = launch_geometry(_spec("// peak: tensor_map A box=(128, 64)\n"), get_problem("matmul"), "bf16",
                               {"M": 256, "N": 256, "K": 77})
    fault = _launch_error(RuntimeError("CUDA_ERROR_ILLEGAL_INSTRUCTION"), geometry)
    assert isinstance(fault, KernelFault) and "tensor map of zeros" in str(fault) and "154 bytes" in str(fault)
    timeout = _launch_error(KernelFault("did not finish", "timeout"), geometry)
    assert timeout.kind == "timeout" and "Likely cause" in str(timeout)
    refused = InvalidInput("cluster=(4, 4, 1) has more than 8 blocks", None)
    assert _launch_error(refused, geometry) is refused
    plain = _launch_error(RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS"), {"grid": (1, 1, 1)})
    assert isinstance(plain, KernelFault) and "Likely cause" not in str(plain)
