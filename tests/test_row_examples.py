"""The row-problem examples (softmax, rmsnorm, row_sum): every CUDA and HIP kernel compiles with NVRTC at f32, f16
and bf16 without spilling, in its default configuration and (register-resident ones) in every configuration; every
HLSL kernel compiles and, on a Vulkan device (lavapipe counts), computes the right rows at small odd sizes.

The problem plug-ins for these problems live elsewhere, so the HLSL check drives the backend's executor directly:
compile, allocate, write the inputs, poison the outputs with NaN, dispatch twice (the same bits both times), read
back and compare with a float64 numpy reference. tools/bench_rows.py does the same for the CUDA kernels on a GPU.

Convention of the CUDA/HIP examples: one source for every dtype, whose `typedef float T;` line is rewritten for
f16/bf16 (`__half`, `__nv_bfloat16`; HIP: `__half`, `hip_bfloat16`). HLSL examples are per dtype (f16/ holds the
16-bit-storage ones), as a kernel's buffer types fix its dtype there.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from peak_mcp.backends import cuda as cuda_backend
from peak_mcp.backends import hip as hip_backend
from peak_mcp.backends import hlsl as hlsl_backend
from peak_mcp.backends.registry import launch_spec
from peak_mcp.core.launch import with_params
from peak_mcp.problems.declared import C_TYPE

ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = ("softmax", "rmsnorm", "row_sum")
SYMBOLS = ("ROWS", "COLS")
TYPES = {b: C_TYPE[b] for b in ("cuda", "hip")}  # each dtype's storage type, as the problems' preludes name it
KERNELS = sorted(p for problem in PROBLEMS for backend, ext in (("cuda", "cu"), ("hip", "hip"))
                 for p in (ROOT / "examples" / problem / backend).glob(f"*.{ext}"))
HLSL = sorted(p for problem in PROBLEMS for p in (ROOT / "examples" / problem / "hlsl").rglob("*.hlsl"))
SIZES = ((1, 1), (3, 7), (5, 1000), (64, 257))


def backend_of(path: Path) -> str:
    return {".cu": "cuda", ".hip": "hip", ".hlsl": "hlsl"}[path.suffix]


def for_dtype(source: str, backend: str, dtype: str) -> str:
    """The source for a dtype: its one `typedef float T;` line rewritten."""
    out, count = re.subn(r"^typedef float T;", f"typedef {TYPES[backend][dtype]} T;", source, count=1, flags=re.M)
    assert count == 1, "a CUDA/HIP example has exactly one `typedef float T;` line"
    return out


@pytest.fixture(scope="module")
def compilers() -> dict[str, Any]:
    return {"cuda": cuda_backend.CudaExecutor(None, arch="sm_90a"),
            "hip": hip_backend.open_executor(None, hip_arch="sm_90a")}


def compile_checked(compilers: dict[str, Any], path: Path, dtype: str, config: dict[str, int] | None = None) -> dict:
    backend = backend_of(path)
    source = for_dtype(path.read_text(), backend, dtype)
    spec = launch_spec(source, backend, SYMBOLS)
    resources = compilers[backend].compile(with_params(source, spec.config(config)), spec).resources
    assert resources["registers"] > 0
    assert resources.get("spill_store_bytes", 0) == 0 and resources.get("stack_frame_bytes", 0) == 0, \
        (path.name, dtype, config, resources)
    return resources


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("path", KERNELS, ids=lambda p: f"{p.parts[-3]}/{p.parent.name}/{p.name}")
def test_kernel_compiles_without_spills(compilers: dict[str, Any], path: Path, dtype: str) -> None:
    compile_checked(compilers, path, dtype)


REGISTER_RESIDENT = [p for p in KERNELS if p.suffix == ".cu" and "EPT=" in p.read_text()]


@pytest.mark.parametrize("path", REGISTER_RESIDENT, ids=lambda p: f"{p.parts[-3]}/{p.name}")
def test_every_configuration_of_a_register_resident_kernel_fits(compilers: dict[str, Any], path: Path) -> None:
    """f32 keeps the most registers per element (EPT / 4 vectors of 16 bytes): every (block, EPT) pair the
    `where` line admits compiles without spilling (GRID only changes the launch, so one value of it is enough)."""
    spec = launch_spec(path.read_text(), "cuda", SYMBOLS)
    names = [n for n in spec.params if n != "GRID"]
    for values in itertools.product(*(spec.params[n] for n in names)):
        config = dict(zip(names, values, strict=True))
        if spec.violated({"ROWS": 8192, "COLS": 8192}, config) is None:
            compile_checked(compilers, path, "f32", config)


def test_examples_follow_the_ladder_and_the_abi() -> None:
    """Every problem has its ladder on each backend; sources name the ABI's arguments in order; geometry is valid
    for every configuration at every size, ROWS=1 and huge rows included."""
    for problem in PROBLEMS:
        cuda = sorted(p.stem for p in (ROOT / "examples" / problem / "cuda").glob("*.cu"))
        hip = sorted(p.stem for p in (ROOT / "examples" / problem / "hip").glob("*.hip"))
        assert cuda == hip and len(cuda) >= 5, (problem, cuda, hip)
        assert any("persistent" in name for name in cuda) and any("warp" in name for name in cuda)
        hlsl = sorted(str(p.relative_to(ROOT / "examples" / problem / "hlsl")) for p in
                      (ROOT / "examples" / problem / "hlsl").rglob("*.hlsl"))
        assert hlsl == ["1_groupshared.hlsl", "2_wave.hlsl", "f16/1_groupshared.hlsl", "f16/2_wave.hlsl"], hlsl
    arguments = {"softmax": r"\(const T\* __restrict__ x, T\* __restrict__ y, int ROWS, int COLS\)",
                 "rmsnorm": r"\(const T\* __restrict__ x, const T\* __restrict__ w, T\* __restrict__ y, int ROWS, "
                            r"int COLS\)",
                 "row_sum": r"\(const T\* __restrict__ x, float\* __restrict__ y, int ROWS, int COLS\)"}
    for path in KERNELS:
        source = path.read_text()
        assert re.search(arguments[path.parts[-3]], source), path
        spec = launch_spec(source, backend_of(path), SYMBOLS)
        for values in itertools.product(*spec.params.values()):
            config = dict(zip(spec.params, values, strict=True))
            for rows, cols in ((1, 1), (7, 1001), (8192, 8192), (3, 10_000_000), (1_000_003, 3)):
                if spec.violated({"ROWS": rows, "COLS": cols}, config) is None:
                    geometry = spec.evaluate({"ROWS": rows, "COLS": cols}, config)
                    assert geometry["grid"][0] <= 2**31 - 1 and np.prod(geometry["block"]) <= 1024, (path, config)


# --- HLSL: compile everywhere, run on a Vulkan device ---------------------------------------------------------

PROBE = hlsl_backend.probe()
HAS_COMPILER = bool(PROBE["compiler"].get("available"))
HAS_DEVICE = bool(PROBE["devices"]) and HAS_COMPILER
REASON = "; ".join(f"{m['what']}: {m['why']}" for m in PROBE["missing"]) or "no Vulkan device"


def hlsl_dtype(path: Path) -> str:
    return "f16" if path.parent.name == "f16" else "f32"


@pytest.mark.vulkan
@pytest.mark.skipif(not HAS_COMPILER, reason=f"no HLSL compiler: {REASON}")
@pytest.mark.parametrize("path", HLSL, ids=lambda p: str(p.relative_to(ROOT / "examples")))
def test_hlsl_example_compiles_in_every_configuration(path: Path) -> None:
    executor = hlsl_backend.open_executor(None)
    source = path.read_text()
    spec = launch_spec(source, "hlsl", SYMBOLS)
    for values in itertools.product(*spec.params.values()):
        config = dict(zip(spec.params, values, strict=True))
        resources = executor.compile(with_params(source, config), spec).resources
        assert resources["threads_per_group"] == config["NT"]
        assert ("StorageBuffer16BitAccess" in resources["capabilities"]) == (hlsl_dtype(path) == "f16")


def reference(problem: str, x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(float64 result, per-element error scale)."""
    if problem == "softmax":
        e = np.exp(x - x.max(axis=1, keepdims=True))
        ref = e / e.sum(axis=1, keepdims=True)
        return ref, np.abs(ref)
    if problem == "rmsnorm":
        ref = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * w[None, :]
        return ref, np.maximum(np.abs(ref), 1e-3)
    return x.sum(axis=1), np.abs(x).sum(axis=1)  # a sum is conditioned by sum |x|


@pytest.fixture(scope="module")
def device() -> Any:
    executor = hlsl_backend.open_executor(0)
    yield executor
    executor.close()


def run_rows(device: Any, path: Path, config: dict[str, int], rows: int, cols: int, rng: Any) -> float:
    """Largest error / scale of the kernel at one size (outputs poisoned with NaN; two launches, the same bits)."""
    problem, dtype = path.relative_to(ROOT / "examples").parts[0], hlsl_dtype(path)
    storage = np.float16 if dtype == "f16" else np.float32
    source = path.read_text()
    spec = launch_spec(source, "hlsl", SYMBOLS)
    compiled = device.compile(with_params(source, config), spec)
    x = rng.uniform(-4, 4, (rows, cols)).astype(storage)
    w = rng.uniform(0.5, 1.5, cols).astype(storage)
    inputs = [x, w] if problem == "rmsnorm" else [x]
    out_type = np.float32 if problem == "row_sum" else storage
    out_shape = (rows,) if problem == "row_sum" else (rows, cols)
    count = int(np.prod(out_shape))
    buffers = [device.alloc(a.nbytes) for a in inputs]
    y = device.alloc(count * np.dtype(out_type).itemsize)
    try:
        for buf, array in zip(buffers, inputs, strict=True):
            device.write(buf, array)
        results = []
        for _ in range(2):
            device.write(y, np.full(out_shape, np.nan, out_type))  # outputs start as NaN
            device.run(compiled, [device.pointer(b, 0) for b in [*buffers, y]], [rows, cols],
                       spec.evaluate({"ROWS": rows, "COLS": cols}, config))
            results.append(device.read(y, y.size).view(out_type)[:count].copy())
    finally:
        for buf in [*buffers, y]:
            device.free(buf)
    assert results[0].tobytes() == results[1].tobytes(), "two launches gave different bits"
    out = results[0].astype(np.float64).reshape(out_shape)
    assert np.isfinite(out).all(), f"{config} {rows}x{cols}: outputs left unwritten (NaN)"
    ref, scale = reference(problem, x.astype(np.float64), w.astype(np.float64))
    # half rounds to 2^-11 relative down to its smallest normal, 2^-14; below, to 2^-25 absolute
    floor = 2.0**-14 if out_type == np.float16 else 1e-30
    return float((np.abs(out - ref) / np.maximum(scale, floor)).max())


needs_device = pytest.mark.skipif(not HAS_DEVICE, reason=f"no Vulkan device or compiler: {REASON}")


@pytest.mark.vulkan
@needs_device
@pytest.mark.parametrize("path", HLSL, ids=lambda p: str(p.relative_to(ROOT / "examples")))
def test_hlsl_example_computes_the_rows(device: Any, path: Path) -> None:
    spec = launch_spec(path.read_text(), "hlsl", SYMBOLS)
    bound = 1e-3 if hlsl_dtype(path) == "f16" and "row_sum" not in path.parts else 1e-5
    rng = np.random.default_rng(3)
    for config in (spec.config(), {**spec.config(), "NT": 64}):  # the default, and a group smaller than some rows
        for rows, cols in SIZES:
            error = run_rows(device, path, config, rows, cols, rng)
            assert error <= bound, f"{path.name} {config} {rows}x{cols}: error {error:.2e} > {bound}"


@pytest.mark.vulkan
@needs_device
@pytest.mark.parametrize("path", [p for p in HLSL if hlsl_dtype(p) == "f32"],
                         ids=lambda p: str(p.relative_to(ROOT / "examples")))
def test_hlsl_rows_past_one_dispatch_dimension(device: Any, path: Path) -> None:
    """More than 65535 rows: groups spill into y (row = gid.y * 65535 + gid.x), the last y row partly past ROWS."""
    error = run_rows(device, path, {"NT": 64}, 65_600, 3, np.random.default_rng(5))
    assert error <= 1e-5, error


# --- tools/bench_rows.py: its own annotation reader agrees with the server's ------------------------------------


def load_bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_rows", ROOT / "tools" / "bench_rows.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_bench_reads_annotations_as_the_server_does() -> None:
    bench = load_bench()
    for path in KERNELS:
        if path.suffix != ".cu":
            continue
        source = path.read_text()
        ours, server = bench.parse_annotation(source), launch_spec(source, "cuda", SYMBOLS)
        assert ours["entry"] == server.entry and ours["params"] == server.params
        for sizes in ({"ROWS": 8192, "COLS": 8192}, {"ROWS": 7, "COLS": 1001}, {"ROWS": 1, "COLS": 1}):
            configs = bench.configs(ours, sizes, 1000)
            assert configs[0] == server.config()
            assert all(server.violated(sizes, c) is None for c in configs)
            for config in configs:
                expected = server.evaluate(sizes, config)
                assert bench.geometry(ours, sizes, config) == {k: expected[k] for k in ("grid", "block", "shared")}
        bf16 = bench.kernel_source(source, "bf16", {"BLOCK": 128})
        assert bf16.startswith("#define BLOCK 128\n#line 1\n") and "typedef __nv_bfloat16 T;" in bf16
    assert bench.min_bytes("softmax", 8192, 8192, "bf16") == 2 * 8192 * 8192 * 2
    assert bench.min_bytes("row_sum", 8192, 8192, "f32") == 8192 * 8192 * 4 + 8192 * 4
    with pytest.raises(ValueError):
        bench.evaluate("__import__('os')", {})


def test_bench_table_reports_failures_as_rows() -> None:
    """A kernel that failed to compile, one that ran wrong and a skipped torch.compile are rows of the table."""
    bench = load_bench()
    ok = {"config": {"BLOCK": 256}, "error": 1e-7, "odd_errors": {"1x1": 0.0}, "correct": True, "ms": 0.2,
          "gbps": 2684.4}
    report = {"rows": 8192, "cols": 8192, "reps": 20, "flush": "write 256 MB, then read 128 MB",
              "copy": {"copy_gbps": 3000.0, "device": "H100", "sms": 132},
              "groups": [{"problem": "softmax", "dtype": "bf16", "kernels": [
                  {"kernel": "a.cu", "configs": [ok]},
                  {"kernel": "b.cu", "configs": [{**ok, "correct": False}]},
                  {"kernel": "c.cu", "configs": [{"config": {}, "failure": "CompileException: x | y\nz"}]},
                  {"kernel": "d.cu", "configs": [], "failure": "no answer within the time limit (a hang?)"}],
                  "torch": {"torch_eager_ms": 0.25, "torch_compile_skipped": "torch.compile failed: E"}}]}
    lines = bench.table(report).splitlines()
    rows = [line for line in lines if line.startswith("| softmax")]
    assert len(rows) == 6 and all(line.count("|") == 10 for line in rows), rows
    assert "89%" in rows[0] and "WRONG" in rows[1] and "FAILED: CompileException: x / y z" in rows[2]
    assert "a hang?" in rows[3] and "torch eager" in rows[4] and "skipped: torch.compile failed" in rows[5]


def test_bench_child_watchdog_names_the_kernel_in_flight() -> None:
    """A child that hangs is killed after the per-kernel limit, one that dies is reported with its exit status; in
    both cases the kernel it had started is the one blamed, and results it already sent are kept."""
    import sys
    import time

    bench = load_bench()

    def child(body: str) -> list[str]:
        start = "import json, os, sys, time\nsay = lambda **e: print(json.dumps(e), flush=True)\n"
        return [sys.executable, "-c", start + body]

    done, current, why = bench.one_child(child("say(event='start', kernel='k.cu'); time.sleep(60)"), 1.0,
                                         time.monotonic() + 30)
    assert (done, current) == ([], "k.cu") and "no answer within the time limit" in why
    body = "say(event='start', kernel='a.cu'); say(event='result', kernel='a.cu', configs=[])\n" \
           "say(event='start', kernel='b.cu'); sys.stderr.write('boom\\n'); os.abort()"
    done, current, why = bench.one_child(child(body), 10.0, time.monotonic() + 30)
    assert [r["kernel"] for r in done] == ["a.cu"] and current == "b.cu"
    assert "died (exit -6)" in why and "boom" in why
    done, current, why = bench.one_child(child("say(event='start', kernel='c.cu'); sys.exit(3)"), 10.0,
                                         time.monotonic() + 30)
    assert (done, current, why) == ([], "c.cu", "")  # a sticky CUDA error: the child says so and exits 3
