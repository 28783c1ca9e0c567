"""Yardsticks (peak_mcp/evaluation/yardsticks.py): the roofline everywhere, torch timing on the CPU where torch is
installed, the never-raise contract everywhere, and copy bandwidth and torch on cupy arrays on a CUDA GPU."""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest

from peak_mcp.evaluation.yardsticks import Roofline, YardstickTiming, copy_bandwidth, roofline_ms, time_torch


def test_roofline_memory_bound() -> None:
    # 1 GB moved at 1000 GB/s: 1 ms; 1 GFLOP at 100 TFLOP/s: 0.01 ms.
    r = roofline_ms(1e9, 1e9, 100.0, 1000.0)
    assert r == Roofline(ms=pytest.approx(1.0), bound="memory", compute_ms=pytest.approx(0.01),
                         memory_ms=pytest.approx(1.0))


def test_roofline_compute_bound() -> None:
    # matmul 4096^3 in f32: 2 * 4096^3 FLOP at 50 TFLOP/s against 3 * 4096^2 * 4 bytes at 3000 GB/s.
    flops, nbytes = 2 * 4096**3, 3 * 4096**2 * 4
    r = roofline_ms(flops, nbytes, 50.0, 3000.0)
    assert r.bound == "compute"
    assert r.ms == pytest.approx(flops / 50e12 * 1e3) and r.memory_ms == pytest.approx(nbytes / 3000e9 * 1e3)
    assert r.ms == max(r.compute_ms, r.memory_ms)


def test_roofline_edges() -> None:
    assert roofline_ms(0, 0, 1.0, 1.0) == Roofline(0.0, "memory", 0.0, 0.0)
    assert roofline_ms(0, 4e9, 1.0, 2000.0).ms == pytest.approx(2.0)
    for bad in ((-1, 0, 1, 1), (0, -1, 1, 1), (1, 1, 0, 1), (1, 1, 1, 0), (1, 1, float("nan"), 1)):
        with pytest.raises(ValueError):
            roofline_ms(*bad)


def test_without_torch_nothing_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    for compile in (False, True):
        t = time_torch(lambda x: x, [np.ones(4)], compile=compile, budget_s=0.1)
        assert isinstance(t, YardstickTiming) and not t.available
        assert "torch cannot be imported" in t.why and t.median_ms is None
        assert t.library == ("torch.compile" if compile else "torch eager")
        assert t.as_dict()["available"] is False


def test_copy_bandwidth_without_cupy_raises_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(ImportError):
        copy_bandwidth(0, nbytes=1 << 20)


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def test_torch_eager_on_the_cpu(torch) -> None:
    x = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    started = time.monotonic()
    t = time_torch(lambda a: torch.softmax(a, dim=1), [x], compile=False, budget_s=0.2, min_reps=5)
    assert t.available, t.why
    assert t.library == "torch eager" and t.version == torch.__version__ and t.device == "cpu"
    assert t.reps >= 5 and 0 < t.min_ms <= t.median_ms <= t.max_ms and t.cv >= 0
    assert t.compile_s is None and not t.cold_cache
    assert time.monotonic() - started < 5


def test_torch_compile_path_on_the_cpu(torch) -> None:
    # The "eager" backend goes through dynamo (tracing, guards) without a C++ or Triton build: the compile path,
    # cheaply. The default backend (inductor) is exercised on the GPU.
    x = torch.randn(64, 64)
    t = time_torch(lambda a: torch.relu(a) * 2, [x], compile=True, budget_s=0.2, min_reps=3,
                   compile_backend="eager")
    assert t.available, t.why
    assert t.library == "torch.compile" and t.compile_s is not None and t.compile_s > 0 and t.reps >= 3


def test_a_function_that_raises_is_reported(torch) -> None:
    def broken(a):
        raise RuntimeError("shapes do not match")

    for compile in (False, True):
        t = time_torch(broken, [np.ones((4, 4), np.float32)], compile=compile, budget_s=0.1,
                       compile_backend="eager")
        assert not t.available and "shapes do not match" in t.why and t.median_ms is None
        assert t.version == torch.__version__
    t = time_torch(lambda a: a, [np.ones(3)], compile=True, budget_s=0.1, compile_backend="no_such_backend")
    assert not t.available and "no_such_backend" in t.why


def test_bf16_storage_is_viewed_as_bfloat16(torch) -> None:
    values = torch.randn(8, 8).to(torch.bfloat16)
    storage = values.view(torch.int16).numpy().view(np.uint16)  # how the workspace keeps bf16: raw 16-bit words
    seen = []
    t = time_torch(lambda a: seen.append(a.dtype) or a * 2, [storage], compile=False, budget_s=0.05, min_reps=1,
                   dtype="bf16")
    assert t.available, t.why
    assert set(seen) == {torch.bfloat16}


def test_times_a_kernelbench_torch_reference(torch) -> None:
    # The wiring the worker does: a KernelBench problem's torch_reference, at the session's sizes, on the inputs.
    from peak_mcp.problems.kernelbench.translate import declare_kernelbench
    from tests.test_kernelbench import generated, load

    problem = declare_kernelbench(load("linear"), "linear")
    sizes = {"BATCH_SIZE": 8, "IN_FEATURES": 64}
    inputs = [a.astype(np.float32) for a in generated(problem, sizes)]
    t = time_torch(lambda *ts: problem.torch_reference(*ts, **sizes), inputs, compile=False, budget_s=0.1,
                   min_reps=3)
    assert t.available, t.why
    assert t.median_ms > 0


# --- on a CUDA GPU ------------------------------------------------------------------------------------------------


def _cuda_device() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_device(), reason="no CUDA GPU (or no cupy)")
def test_gpu_copy_bandwidth_and_torch_on_cupy_arrays() -> None:
    import cupy

    torch = pytest.importorskip("torch")
    gbps = copy_bandwidth(0)
    assert 100 < gbps < 20000  # an H100 copies about 3000 GB/s (read plus written)
    started = time.monotonic()
    assert copy_bandwidth(0) == gbps and time.monotonic() - started < 0.01  # cached
    print(f"copy bandwidth {gbps:.0f} GB/s")

    n = 1 << 24
    x = cupy.random.standard_normal(n, dtype=cupy.float32)
    eager = time_torch(lambda a: torch.relu(a), [x], compile=False, budget_s=0.5)
    assert eager.available, eager.why
    assert eager.device == "cuda:0" and eager.cold_cache and eager.median_ms > 0
    # relu reads and writes 64 MiB each: not faster than the copy bandwidth allows.
    floor = roofline_ms(0, 2 * 4 * n, 1000.0, gbps)
    assert eager.median_ms >= 0.8 * floor.ms and floor.bound == "memory"
    print(f"torch eager relu {eager.median_ms:.4f} ms, roofline {floor.ms:.4f} ms")

    compiled = time_torch(lambda a: torch.relu(a) * 2 + 1, [x], compile=True, budget_s=0.5)
    assert compiled.available, compiled.why
    assert compiled.compile_s > 0 and compiled.median_ms > 0
    print(f"torch.compile relu*2+1 {compiled.median_ms:.4f} ms (compile {compiled.compile_s:.1f} s)")

    # The arrays are shared, not copied: a write through torch shows in cupy.
    bf = cupy.zeros(16, dtype=cupy.uint16)
    t = time_torch(lambda a: a.fill_(1.0), [bf], compile=False, budget_s=0.05, min_reps=1, dtype="bf16")
    assert t.available, t.why
    assert int(bf[0]) == 0x3F80  # bf16 1.0
