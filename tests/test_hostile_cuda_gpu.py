"""Hostile CUDA kernels (tests/hostile/manifest.yaml) through a real in-process MCP client on a GPU.

One session per size (256^3, and 100x77x53 where edges matter); every manifest entry for cuda is submitted to it
once and each (entry, size) is its own test. After every fault (hang, illegal address, printf flood) a good kernel
must benchmark in the same session. Without a GPU only the compile checks run: every hostile .cu compiles with
NVRTC (no GPU needed) and every hostile .hlsl with the HLSL compiler found on PATH, so a verdict is never just a
compile error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import has_device, hip_platform, skip_reason
from tests.hostile.harness import HOSTILE, UNALIGNED, Outcome, load_manifest, run_in_process

ENTRIES = load_manifest("cuda")
SIZES = {"256cube": {"M": 256, "N": 256, "K": 256}, "100x77x53": UNALIGNED}
needs_gpu = pytest.mark.skipif(not has_device("cuda"), reason=f"no CUDA GPU: {skip_reason('cuda')}")


REFUSED_AT_COMPILE = {e.file for e in ENTRIES if e.status == ("compile_error",)}  # tests/test_persistent_state.py


@pytest.mark.parametrize("path", [p for p in sorted((HOSTILE / "cuda").glob("*.cu"))
                                  if f"cuda/{p.name}" not in REFUSED_AT_COMPILE], ids=lambda p: p.name)
def test_hostile_cuda_kernel_compiles(path: Path) -> None:
    from peak_mcp.backends import cuda as cuda_backend
    from peak_mcp.backends.registry import launch_spec
    from peak_mcp.problems.matmul import Matmul

    source = path.read_text()
    spec = launch_spec(source, "cuda", Matmul.symbols)
    for sizes in SIZES.values():
        spec.evaluate(sizes)
    compiled = cuda_backend.CudaExecutor(None, arch="sm_90a").compile(source, spec)
    assert compiled.resources["registers"] > 0


@pytest.mark.parametrize("path", sorted((HOSTILE / "hlsl").glob("*.hlsl")), ids=lambda p: p.name)
def test_hostile_hlsl_shader_compiles(path: Path, tmp_path: Path) -> None:
    import subprocess

    from peak_mcp.backends.hlsl import find_compiler

    compiler = find_compiler()
    if compiler is None:
        pytest.skip("no HLSL compiler (dxc or glslangValidator) on PATH")
    done = subprocess.run(compiler.command("main", str(path), str(tmp_path / "out.spv")), capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_manifest_covers_every_file() -> None:
    on_disk = {f"{p.parent.name}/{p.name}" for p in HOSTILE.glob("*/*") if p.suffix in (".cu", ".hlsl")}
    assert on_disk == {e.file for e in load_manifest(problem=None)}
    assert all(e.path.read_text().startswith("// HOSTILE ") for e in load_manifest(problem=None))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Outcome]]:
    return {label: run_in_process(tmp_path_factory.mktemp(f"hostile-cuda-{label}") / "data", "cuda", sizes, ENTRIES,
                              8)
            for label, sizes in SIZES.items()}


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_hostile_cuda(outcomes: dict[str, dict[str, Outcome]], entry: Any, size: str) -> None:
    outcome = outcomes[size][entry.file]
    assert outcome.ok, f"{entry.cls} ({entry.file}) at {size}: {outcome.why()}"


HIP_TWINS = load_manifest("hip")  # the same kernels as HIP source: on NVIDIA they must get the CUDA verdicts
# On NVIDIA only: on AMD there is no compute-sanitizer and no PTX, which some of the CUDA verdicts rest on.
needs_hip_gpu = pytest.mark.skipif(not has_device("hip") or hip_platform() != "nvidia",
                                   reason=f"no HIP GPU on NVIDIA: {skip_reason('hip')}")


@pytest.fixture(scope="module")
def hip_outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    return run_in_process(tmp_path_factory.mktemp("hostile-hip") / "data", "hip", UNALIGNED, HIP_TWINS, 8)


@pytest.mark.gpu
@needs_hip_gpu
@pytest.mark.parametrize("entry", HIP_TWINS, ids=lambda e: e.name)
def test_hostile_hip_twin(hip_outcomes: dict[str, Outcome], entry: Any) -> None:
    outcome = hip_outcomes[entry.file]
    assert outcome.ok, f"HIP twin of {entry.file} at 100x77x53: {outcome.why()}"
