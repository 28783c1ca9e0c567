"""Hostile CUDA kernels (tests/hostile/manifest.yaml) through a real in-process MCP client on a GPU.

One session per problem and size (matmul: 256^3 and 100x77x53; softmax, rmsnorm, row_sum: ROWS x COLS 256x1024 and
100x77; harness.SESSION_SIZES); every manifest entry for cuda is submitted to its problem's session once and each
(entry, size) is its own test. After every fault (hang, illegal address, printf flood) a good kernel must benchmark
in the same session. Without a GPU only the compile checks run: every hostile .cu (and its HIP twin) compiles with
NVRTC for its problem's ABI (no GPU needed) and every hostile .hlsl with the HLSL compiler found on PATH, so a
verdict is never just a compile error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import has_device, hip_platform, skip_reason
from tests.hostile.harness import HOSTILE, SYMBOLS, Outcome, load_manifest, params, run_in_process, session_sizes

ENTRIES = load_manifest("cuda", problem=None)
SIZES = ("aligned", "unaligned")  # harness.session_sizes: per problem
needs_gpu = pytest.mark.skipif(not has_device("cuda"), reason=f"no CUDA GPU: {skip_reason('cuda')}")
# tests/test_persistent_state.py: these are refused at compile on purpose
COMPILED = [e for e in ENTRIES if e.status != ("compile_error",)]


@pytest.fixture(scope="module")
def compilers() -> dict[str, Any]:
    """NVRTC for CUDA and for HIP on NVIDIA (no GPU needed); the tests skip where NVRTC cannot be loaded."""
    from peak_mcp.backends import cuda as cuda_backend
    from peak_mcp.backends import hip as hip_backend

    try:
        return {"cuda": cuda_backend.CudaExecutor(None, arch="sm_90a"),
                "hip": hip_backend.open_executor(None, hip_arch="sm_90a")}
    except Exception as exc:  # no cuda-python / libnvrtc here: nothing to compile with
        pytest.skip(f"NVRTC unavailable: {type(exc).__name__}: {exc}")


@pytest.mark.parametrize("backend", ["cuda", "hip"])
@pytest.mark.parametrize("entry", COMPILED, ids=lambda e: e.file.removesuffix(".cu"))
def test_hostile_cuda_kernel_compiles(compilers: dict[str, Any], entry: Any, backend: str) -> None:
    """Each hostile .cu, and its HIP twin, compiles for its problem's ABI, and its geometry evaluates at the sizes
    the GPU tests run it at."""
    from dataclasses import replace

    from peak_mcp.backends.registry import launch_spec

    source = replace(entry, backend=backend).source()
    spec = launch_spec(source, backend, SYMBOLS[entry.problem])
    for sizes in session_sizes(entry.problem, backend).values():
        spec.evaluate(sizes)
    compiled = compilers[backend].compile(source, spec)
    assert compiled.resources["registers"] > 0


@pytest.mark.parametrize("path", sorted(HOSTILE.glob("*/*.hlsl")), ids=lambda p: f"{p.parent.name}/{p.stem}")
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
    return {label: run_in_process(tmp_path_factory.mktemp(f"hostile-cuda-{label}") / "data", "cuda", label, ENTRIES,
                                  8)
            for label in SIZES}


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("entry", params(ENTRIES, ".cu"))
def test_hostile_cuda(outcomes: dict[str, dict[str, Outcome]], entry: Any, size: str) -> None:
    outcome = outcomes[size][entry.file]
    assert outcome.ok, f"{entry.cls} ({entry.file}) at {size}: {outcome.why()}"


# The same kernels as HIP source: on NVIDIA they must get the CUDA verdicts.
HIP_TWINS = load_manifest("hip", problem=None)
# On NVIDIA only: on AMD there is no compute-sanitizer and no PTX, which some of the CUDA verdicts rest on.
needs_hip_gpu = pytest.mark.skipif(not has_device("hip") or hip_platform() != "nvidia",
                                   reason=f"no HIP GPU on NVIDIA: {skip_reason('hip')}")


@pytest.fixture(scope="module")
def hip_outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    return run_in_process(tmp_path_factory.mktemp("hostile-hip") / "data", "hip", "unaligned", HIP_TWINS, 8)


@pytest.mark.gpu
@needs_hip_gpu
@pytest.mark.parametrize("entry", params(HIP_TWINS, ".cu"))
def test_hostile_hip_twin(hip_outcomes: dict[str, Outcome], entry: Any) -> None:
    outcome = hip_outcomes[entry.file]
    assert outcome.ok, f"HIP twin of {entry.file} at {outcome.sizes}: {outcome.why()}"
