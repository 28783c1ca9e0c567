"""Problem files without a device: declarations, the describe subprocess, the registry's errors, the ABI and naive
kernels (compiled with NVRTC and the HLSL compiler), tolerances, sampled sizes, and the rule that problem code runs
only in worker processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from peak_mcp.backends.registry import launch_spec
from peak_mcp.core.devices import Device
from peak_mcp.core.errors import NotFound, PeakError
from peak_mcp.loop.pipeline.verdicts import impossible_speed
from peak_mcp.problems.declared import DeclaredProblem
from peak_mcp.problems.loading import problem_code_allowed
from peak_mcp.problems.registry import BUILTIN_DIR, ProblemRegistry, describe_in_subprocess
from peak_mcp.problems.shipped import BUILTIN_CLASSES, get_problem

NEW = ("softmax", "rmsnorm", "row_sum")
SIGNATURES = {
    "softmax": 'extern "C" __global__ void <entry>(const {T}* x, {T}* y, int ROWS, int COLS)',
    "rmsnorm": 'extern "C" __global__ void <entry>(const {T}* x, const {T}* w, {T}* y, int ROWS, int COLS)',
    "row_sum": 'extern "C" __global__ void <entry>(const {T}* x, float* y, int ROWS, int COLS)',
}
GOOD = '''
"""Scale: y = 2 x."""
NAME = "{name}"
SIZES = {{"N": 4096}}
INPUTS = {{"x": ("N",)}}
OUTPUTS = {{"y": ("N",)}}
NAIVE = {{"hlsl": """// peak: entry=main groups=(cdiv(N, 64), 1, 1)
struct Params {{ uint N; }};
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<T> x;
[[vk::binding(1)]] RWStructuredBuffer<T> y;
[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID) {{ if (id.x < p.N) y[id.x] = from_f32(2.0 * to_f32(x[id.x])); }}
"""}}


def reference(x):
    return 2 * x
'''


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def test_the_shipped_problems_are_served_beside_matmul() -> None:
    registry = ProblemRegistry(classes=BUILTIN_CLASSES.values())
    assert [p.name for p in registry.problems()] == ["matmul", "attention", "attention_causal", "conv2d", "rmsnorm",
                                                    "row_sum", "softmax"]
    assert registry.errors == []
    softmax = registry.get("softmax")
    assert isinstance(softmax, DeclaredProblem) and softmax.source == str(BUILTIN_DIR / "softmax.py")
    assert softmax.default_sizes == {"ROWS": 8192, "COLS": 8192} and softmax.dtypes == ("f32", "f16", "bf16")
    assert softmax.dtypes_for("hlsl") == ("f32", "f16")
    assert get_problem("matmul").yardstick == "gemm" and softmax.yardstick is None


@pytest.mark.parametrize("name", NEW)
def test_each_abi_is_the_agreed_signature(name: str) -> None:
    problem = get_problem(name)
    for backend, dtype, t in (("cuda", "f32", "float"), ("cuda", "f16", "__half"), ("cuda", "bf16", "__nv_bfloat16"),
                              ("hip", "bf16", "hip_bfloat16")):
        assert SIGNATURES[name].format(T=t) in problem.abi(backend, dtype).splitlines()[1]
    hlsl = problem.abi("hlsl", "f16")
    assert "[[vk::binding(0)]] x (half" in hlsl and "struct Params { uint ROWS; uint COLS; };" in hlsl
    if name == "row_sum":
        assert "[[vk::binding(1)]] y (float, ROWS, read-write)" in hlsl
    if name == "rmsnorm":
        assert "1e-6" in problem.title


@pytest.mark.parametrize("name", NEW)
def test_naive_kernels_compile_with_nvrtc(name: str) -> None:
    from peak_mcp.backends import cuda as cuda_backend
    from peak_mcp.backends.hip import HipOnCudaExecutor

    problem = get_problem(name)
    executors = {"cuda": cuda_backend.CudaExecutor(None, arch="sm_90a"), "hip": HipOnCudaExecutor(None, arch="sm_90a")}
    for backend, executor in executors.items():
        for dtype in problem.dtypes_for(backend):
            source = problem.naive_kernel(backend, dtype)
            assert executor.compile(source, launch_spec(source, backend, problem.symbols)).resources["registers"] > 0


def test_naive_kernels_compile_for_hlsl() -> None:
    from peak_mcp.backends.hlsl_compiler import find_compiler

    if find_compiler() is None:
        pytest.skip("no HLSL compiler (dxc or glslangValidator) on PATH")
    from peak_mcp.backends.registry import backend_module

    executor = backend_module("hlsl").open_executor(None)
    for name in NEW:
        problem = get_problem(name)
        for dtype in problem.dtypes_for("hlsl"):
            source = problem.naive_kernel("hlsl", dtype)
            assert executor.compile(source, launch_spec(source, "hlsl", problem.symbols)).resources


def test_problem_code_runs_only_where_it_is_allowed() -> None:
    problem = get_problem("softmax")
    sizes = {"ROWS": 3, "COLS": 5}
    with pytest.raises(PeakError, match="refusing to import the problem file"):
        problem.make_inputs(sizes, "f32", 0, np)
    with problem_code_allowed():
        inputs = problem.make_inputs(sizes, "f32", 0, np)
        refs = problem.reference(inputs, sizes, "f32", 0, float("inf"), np)
    assert refs["y"].values.shape == (15,) and np.allclose(refs["y"].values.reshape(3, 5).sum(axis=1), 1.0)


def test_the_bound_follows_the_output_dtype_and_the_error_scale() -> None:
    """row_sum's y is f32 whatever the session's dtype, and its scale is sum |x|: a zero-mean row sums to far less
    than what its rounding depends on. softmax's f16 output is bounded by f16 roundoffs."""
    sizes = {"ROWS": 4, "COLS": 1000}
    with problem_code_allowed():
        row_sum = get_problem("row_sum")
        x = row_sum.make_inputs(sizes, "f16", 1, np)
        ref = row_sum.reference(x, sizes, "f16", 1, float("inf"), np)["y"]
        softmax = get_problem("softmax")
        y16 = softmax.reference(softmax.make_inputs(sizes, "f16", 1, np), sizes, "f16", 1, float("inf"), np)["y"]
    tol = row_sum.tolerance("f16")
    abs_x = np.abs(x["x"].astype(np.float64)).reshape(4, 1000).sum(axis=1)
    bound = tol.elementwise * ref.scale
    assert np.all(bound >= tol.factor * tol.floor * 2.0**-24 * abs_x) and np.all(bound < 1e-3 * abs_x)
    magnitude = np.maximum(np.abs(y16.values), np.sqrt(np.mean(y16.values**2)))  # rms: tiny y get an absolute bound
    relative = tol.elementwise * y16.scale / magnitude
    assert relative.min() > 2.0**-11 and relative.max() < 0.05  # a few f16 roundoffs, not f32 ones


def test_sampled_sizes_are_awkward_and_above_the_session() -> None:
    problem = get_problem("softmax")
    session = {"ROWS": 64, "COLS": 100}
    sampled = problem.generality_sizes(session)
    assert sampled[0] == {"ROWS": 1, "COLS": 1} and {"ROWS": 7, "COLS": 5} in sampled
    assert {"ROWS": 97, "COLS": 89} in sampled and {"ROWS": 65, "COLS": 129} in sampled
    assert {"ROWS": 67, "COLS": 99} in sampled  # near the session's
    assert {"ROWS": 3, "COLS": 72} in sampled  # rows of whole 16-byte chunks, few of them
    above = problem.sizes_above(session)
    assert above[0][0] == {"ROWS": 4101, "COLS": 33} and above[1][0] == {"ROWS": 33, "COLS": 4101}
    big = problem.sizes_above({"ROWS": 8192, "COLS": 8192})
    assert big[1][0]["COLS"] == 32773 and problem.work(big[1][0]) <= 2**26


def test_cpu_device_sizes_are_scaled_from_any_problem() -> None:
    from peak_mcp.loop.sessions import CPU_DEVICE_BYTES, CPU_DEVICE_FLOPS

    assert get_problem("matmul").scaled_sizes(CPU_DEVICE_FLOPS, CPU_DEVICE_BYTES) == {"M": 1024, "N": 1024, "K": 1024}
    assert get_problem("softmax").scaled_sizes(CPU_DEVICE_FLOPS, CPU_DEVICE_BYTES) == {"ROWS": 1024, "COLS": 2048}
    assert get_problem("row_sum").scaled_sizes(CPU_DEVICE_FLOPS, CPU_DEVICE_BYTES) == {"ROWS": 1024, "COLS": 2048}
    assert get_problem("softmax").scaled_sizes(1e12, 1e12) is None  # the defaults fit already


def test_a_memory_bound_speed_is_judged_against_the_bandwidth() -> None:
    h100 = Device(name="H100", memory_bandwidth_gbps=3350, l2_mb=50, peak_tflops={"fp32": 66.9})
    softmax, sizes = get_problem("softmax"), {"ROWS": 8192, "COLS": 8192}
    moved = 2 * 8192 * 8192 * 4 - 50 * 2**20  # bytes that cannot sit in the L2
    floor_ms = moved / 3350e9 * 1e3
    assert impossible_speed(softmax, "f32", sizes, h100, floor_ms * 1.1) is None
    why = impossible_speed(softmax, "f32", sizes, h100, floor_ms / 2)
    assert why and "GB/s" in why and "MB" in why
    assert impossible_speed(softmax, "f32", {"ROWS": 64, "COLS": 100}, h100, 1e-6) is None  # fits in the cache
    matmul = get_problem("matmul")
    assert "TFLOP/s" in impossible_speed(matmul, "f32", {"M": 4096, "N": 4096, "K": 4096}, h100, 0.5)


# --- problem files that are wrong: each left out with an error naming it; the rest is served ---------------------
BAD = {
    "syntax": ('NAME = "syntax"\nSIZES = {"N": 4}\nINPUTS = {"x": ("N",)\nOUTPUTS = {}\n', 3, "syntax error"),
    "raises": ('NAME = "raises"\nSIZES = {"N": 4}\nimport json\nraise RuntimeError("no license server")\n', 4,
               "RuntimeError: no license server"),
    "shape": ('NAME = "shape"\nSIZES = {"N": 64}\nINPUTS = {"x": ("N",)}\nOUTPUTS = {"y": ("N",)}\n'
              'NAIVE = {"cuda": "// k"}\n\n\ndef reference(x):\n    return x[:-1]\n', 8, "shape"),
    "huge": ('NAME = "huge"\nSIZES = {"N": 1 << 40}\nINPUTS = {"x": ("N",)}\nOUTPUTS = {"y": ("N",)}\n\n\n'
             'def reference(x):\n    return x\n', 2, "over the limit"),
    "badexpr": ('NAME = "badexpr"\nSIZES = {"N": 4}\nINPUTS = {"x": ("N",)}\nOUTPUTS = {"y": ("N",)}\n'
                'FLOPS = "N ** 2"\n\n\ndef reference(x):\n    return x\n', 5, "FLOPS"),
}


def test_bad_problem_files_are_named_with_their_line(tmp_path: Path) -> None:
    for name, (text, _, _) in BAD.items():
        (tmp_path / f"{name}.py").write_text(text)
    write(tmp_path, "hangs", 'NAME = "hangs"\nwhile True:\n    pass\n')
    write(tmp_path, "good", GOOD.format(name="scale2"))
    write(tmp_path, "twin", GOOD.format(name="scale2"))  # the same NAME in the same folder
    registry = ProblemRegistry([tmp_path], classes=BUILTIN_CLASSES.values(), timeout_s=8)
    errors = {Path(e.file).stem: e for e in registry.errors}
    for name, (_, line, words) in BAD.items():
        assert errors[name].line == line and words in errors[name].message, errors[name]
        assert str(tmp_path / f"{name}.py") in str(errors[name])
    assert "took more than 8 s" in errors["hangs"].message
    assert "already declared by" in errors["twin"].message and errors["twin"].line == 2
    assert registry.get("scale2").source == str(tmp_path / "good.py")
    assert {"matmul", "softmax", "scale2"} <= {p.name for p in registry.problems()}
    with pytest.raises(NotFound, match=r"its file failed to load: .*raises\.py:4"):
        registry.get("raises")


def test_an_operator_problem_cannot_take_a_shipped_name(tmp_path: Path) -> None:
    write(tmp_path, "softmax", GOOD.format(name="softmax"))
    write(tmp_path, "mine", GOOD.format(name="matmul"))
    registry = ProblemRegistry([tmp_path], classes=BUILTIN_CLASSES.values())
    assert registry.get("softmax").source == str(BUILTIN_DIR / "softmax.py")
    assert registry.get("matmul") is BUILTIN_CLASSES["matmul"]
    errors = {Path(e.file).stem: e for e in registry.errors}
    assert errors["softmax"].level == "error" and "taken by the shipped problem softmax" in errors["softmax"].message
    assert errors["mine"].level == "error" and "taken by the built-in problem matmul" in errors["mine"].message
    assert not any(e.file.startswith(str(BUILTIN_DIR)) for e in registry.errors)


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    path = write(tmp_path, "scale", GOOD.format(name="scale2"))
    registry = ProblemRegistry([tmp_path], builtin_dir=None)
    first = registry.get("scale2")
    path.write_text(path.read_text().replace("Scale: y = 2 x.", "Scale: y = 2 x, read again."))
    registry.refresh()
    again = registry.get("scale2")
    assert again is not first and again.declaration.doc.startswith("Scale: y = 2 x, read again.")


def test_the_describe_process_cannot_read_outside_its_folder(tmp_path: Path) -> None:
    """Confined like a compiler: the problem file's folder and the Python runtime, nothing of the home."""
    from peak_mcp.confine.sandbox import landlock_abi

    if not landlock_abi().active:
        pytest.skip("no Landlock on this kernel")
    secret = Path(os.path.expanduser("~")) / ".peak-describe-secret"
    secret.write_text("secret")
    try:
        path = write(tmp_path, "snoop", f'NAME = "snoop"\nSIZES = {{"N": 4}}\nopen({str(secret)!r}).read()\n')
        with pytest.raises(Exception, match="PermissionError"):
            describe_in_subprocess(path)
    finally:
        secret.unlink()


ROWS_CHECK = """
import json, sys
import numpy as np
from peak_mcp.problems.shipped import get_problem
from peak_mcp.problems.loading import allow_problem_code
allow_problem_code()
out = {}
for name in ("softmax", "rmsnorm", "row_sum"):
    problem = get_problem(name)
    assert problem.declaration.batch == "ROWS"
    for dtype in ("f32", "bf16"):
        sizes = {"ROWS": 37, "COLS": 53}
        inputs = problem.make_inputs(sizes, dtype, 3, np)
        full = next(iter(problem.references(inputs, sizes, dtype, np).values()))
        n = full.values.size
        picks = np.array([0, 5, n // 2, n // 2 + 1, n - 1])
        values, scale = problem.reference_at(inputs, sizes, dtype, picks, np.asarray)
        out[f"{name}/{dtype}"] = [float(np.max(np.abs(values - full.values[picks]))),
                                  float(np.max(np.abs(scale / full.scale[picks] - 1)))]
print(json.dumps(out))
"""


def test_a_batch_problem_checks_only_the_rows_it_picks() -> None:
    # BATCH = "ROWS": the host check recomputes the picked rows alone; the values are the full reference's, and the
    # bounds differ only through the rms of the rows computed (a few percent at most).
    done = subprocess.run([sys.executable, "-c", ROWS_CHECK], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    for key, (value_gap, scale_gap) in json.loads(done.stdout).items():
        assert value_gap < 1e-12, key
        assert scale_gap < 0.5, key
