"""The shipped example kernels compile (NVRTC needs no GPU) without spilling, and the demo finds them per dtype."""

from __future__ import annotations

from pathlib import Path

import pytest

from peak_mcp.api.demo import DEMO_CPU_SIZES, demo_sizes, example_kernels
from peak_mcp.backends import cuda as cuda_backend
from peak_mcp.backends.registry import launch_spec
from peak_mcp.core.launch import with_params
from peak_mcp.problems.matmul import Matmul

CUDA_EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples" / "matmul" / "cuda").rglob("*.cu"))


@pytest.fixture(scope="module")
def compiler() -> cuda_backend.CudaExecutor:
    return cuda_backend.CudaExecutor(None, arch="sm_90a")


@pytest.mark.parametrize("path", CUDA_EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_cuda_example_compiles_without_spills(compiler: cuda_backend.CudaExecutor, path: Path) -> None:
    source = path.read_text()
    spec = launch_spec(source, "cuda", Matmul.symbols).on_device(132)
    spec.evaluate({"M": 1000, "N": 1032, "K": 520})
    resources = compiler.compile(with_params(source, spec.config()), spec).resources  # the default configuration
    assert resources["registers"] > 0
    assert resources.get("spill_store_bytes", 0) == 0 and resources.get("stack_frame_bytes", 0) == 0, resources


def test_examples_are_found_per_dtype() -> None:
    assert {p.name for p in example_kernels("cuda", "f32")} == {"double_buffered.cu", "regblock_2d.cu",
                                                                 "smem_tiled.cu"}
    # The tuned HLSL ladder (examples/matmul/hlsl/tuned/) stays out of the demo: with its kernels listed, the demo
    # on lavapipe took 7 min 54 s on 2 cores (validation, generality and the sanitizer for each)
    assert {p.name for p in example_kernels("hlsl", "f32")} == {"tiled_groupshared.hlsl", "register_blocked.hlsl"}
    assert example_kernels("hlsl", "f16") == []
    for dtype in ("f16", "bf16"):
        found = example_kernels("cuda", dtype)
        assert {p.name for p in found} == {"mma_pipelined.cu", "wmma_tiled.cu"}
        element = {"f16": "typedef __half T;", "bf16": "typedef __nv_bfloat16 T;"}[dtype]
        assert all(element in p.read_text() for p in found)


def test_include_dirs_add_a_tree_with_crt_when_the_cudart_wheel_lacks_it(tmp_path, monkeypatch) -> None:
    from cuda import pathfinder

    wheel = tmp_path / "wheel" / "include"
    toolkit = tmp_path / "toolkit"
    for root in (wheel, toolkit / "include"):
        root.mkdir(parents=True)
        (root / "cuda_runtime.h").write_text("")
    (toolkit / "include" / "crt").mkdir()
    (toolkit / "include" / "crt" / "mma.h").write_text("")
    monkeypatch.setattr(pathfinder, "find_nvidia_header_directory", lambda name: str(wheel))
    monkeypatch.setattr(cuda_backend.sys, "path", [])
    monkeypatch.setenv("CUDA_HOME", str(toolkit))
    assert cuda_backend.cuda_include_dirs() == [str(wheel), str(toolkit / "include")]
    (wheel / "crt").mkdir()
    (wheel / "crt" / "mma.h").write_text("")
    assert cuda_backend.cuda_include_dirs() == [str(wheel)]  # the wheel is complete: nothing is mixed in


def test_demo_sizes_shrink_only_for_a_cpu_device_left_at_the_default() -> None:
    lavapipe, gpu = {"name": "llvmpipe", "device_type": "cpu"}, {"name": "H100", "device_type": "discrete"}
    assert demo_sizes(lavapipe, None) == DEMO_CPU_SIZES
    assert demo_sizes(gpu, None) is None and demo_sizes(None, None) is None
    asked = {"M": 64, "N": 64, "K": 64}
    assert demo_sizes(lavapipe, asked) is asked


def test_cli_sizes_are_parsed_or_refused_clearly() -> None:
    import argparse

    from peak_mcp.api.cli import parse_sizes

    assert parse_sizes("M=64, N=32,K=16") == {"M": 64, "N": 32, "K": 16}
    for bad in ("foo", "M=", "M=1,N=x", "=4", "M=-3"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not NAME=INTEGER"):
            parse_sizes(bad)
