"""Where the HLSL validator computes: numpy beside Vulkan's host copies, or cupy on the same GPU where the worker
can use it. Runs on lavapipe: the selection's fallbacks for real, and the cupy path through a stand-in cupy whose
arrays are a distinct type ("on the device"), so what crosses between it and the Vulkan buffers is seen."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from peak_mcp.backends import hlsl
from peak_mcp.evaluation import steps as evaluation
from peak_mcp.evaluation.steps import CUDA, HOST, ArrayModule, ReferenceMismatch, array_module, benchmark, validate
from peak_mcp.evaluation.workspace import FRONT_GUARD_BYTES
from peak_mcp.problems.matmul import Matmul
from peak_mcp.runner.jobs import evaluate
from peak_mcp.runner.messages import EvaluateJob
from peak_mcp.runner.pool import DevicePool
from peak_mcp.runner.replies import EvaluateResult
from tests.test_hlsl_backend import CORRECT_BODY, HAS_DEVICE, REASON, job, kernel, spec_of

pytestmark = pytest.mark.vulkan
needs_device = pytest.mark.skipif(not HAS_DEVICE, reason=f"no Vulkan device or compiler: {REASON}")

PROBLEM = Matmul()
SIZES = {"M": 70, "N": 50, "K": 33}  # not tile multiples
C_BYTES = SIZES["M"] * SIZES["N"] * 4


def wrong_kernels(m: int) -> dict[str, str]:
    """Kernels of M rows caught only against the reference: nothing unwritten, NaN or out of bounds."""
    store = "C[row * p.N + col] = acc;"
    return {"one element off": kernel(CORRECT_BODY.replace(store, f"C[row * p.N + col] = (row == {m // 2} && "
                                                                  "col == 11) ? acc + 0.01 : acc;")),
            "one row wrong": kernel(CORRECT_BODY.replace(store, f"C[row * p.N + col] = row == {m - 1} ? "
                                                                "acc * 1.001 : acc;"))}


WRONG = wrong_kernels(SIZES["M"])


class DeviceArray(np.ndarray):
    """An array "on the GPU": what the stand-in cupy makes, and what no Vulkan write may receive."""


class WrongMatmul(DeviceArray):
    """A broken device BLAS: every product is off in its first element."""

    def __matmul__(self, other: Any) -> Any:
        out = np.matmul(np.asarray(self), np.asarray(other)).view(type(self))
        out[(0,) * out.ndim] += 1.0
        return out


def stand_in_cupy(crossed: dict[str, list[int]], array: type[DeviceArray] = DeviceArray) -> Any:
    """numpy under cupy's names; asarray (to the device) and asnumpy (to the host) log the bytes that cross."""

    def to_device(a: Any, dtype: Any = None) -> Any:
        if not isinstance(a, DeviceArray):
            crossed["to_device"].append(np.asarray(a).nbytes)
        return np.asarray(a, dtype).view(array)

    def to_host(a: Any) -> np.ndarray:
        crossed["to_host"].append(a.nbytes)
        return np.asarray(a)

    class Random:
        def __init__(self, seed: int, method: Any = None) -> None:
            self.rng = np.random.RandomState(seed)

        def random_sample(self, count: int) -> Any:
            return self.rng.random_sample(count).view(array)

    xp = types.SimpleNamespace(**{name: getattr(np, name) for name in dir(np) if not name.startswith("__")})
    xp.asarray, xp.asnumpy = to_device, to_host
    xp.random = types.SimpleNamespace(RandomState=Random)
    xp.cuda = types.SimpleNamespace(curand=types.SimpleNamespace(CURAND_RNG_PSEUDO_PHILOX4_32_10=0))
    xp.get_default_memory_pool = lambda: types.SimpleNamespace(free_all_blocks=lambda: None)
    return xp


@pytest.fixture
def fresh_choice() -> Iterator[None]:
    """The choice is cached per device UUID for the worker's life; tests start and leave it empty."""
    evaluation.cuda_beside.cache_clear()
    yield
    evaluation.cuda_beside.cache_clear()


@pytest.fixture(scope="module")
def executor() -> Any:
    ex = hlsl.open_executor(0)
    yield ex
    ex.close()


@pytest.fixture
def watched(executor: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """What crosses between the stand-in cupy and the Vulkan buffers; a device array handed to Vulkan fails."""
    crossed: dict[str, list[int]] = {"to_device": [], "to_host": [], "host_rows": []}
    write = executor.write

    def host_only(buf: Any, data: Any, offset: int = 0) -> None:
        assert not isinstance(data, DeviceArray), "a device array reached a Vulkan write"
        write(buf, data, offset)

    def reference_at(*args: Any, **kwargs: Any) -> Any:
        crossed["host_rows"].append(len(args[3]))
        return Matmul.reference_at(PROBLEM, *args, **kwargs)

    monkeypatch.setattr(executor, "write", host_only)
    monkeypatch.setattr(PROBLEM, "reference_at", reference_at)
    return crossed


# --- the choice, without cupy or a GPU --------------------------------------------------------------------------


def test_without_cupy_or_a_matching_gpu_the_host_computes(fresh_choice: None, monkeypatch: pytest.MonkeyPatch) -> None:
    assert evaluation.cuda_beside(None) == ArrayModule(np, HOST, why="the device reports no UUID")
    monkeypatch.setitem(sys.modules, "cupy", None)  # `import cupy` raises ImportError
    chosen = evaluation.cuda_beside("00" * 16)
    assert chosen.xp is np and chosen.label == HOST and "cupy" in chosen.why, chosen
    evaluation.cuda_beside.cache_clear()
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))  # importable, but no GPU has this UUID
    chosen = evaluation.cuda_beside("00" * 16)
    assert chosen.xp is np and chosen.label == HOST and chosen.why, chosen


def test_buffers_on_the_device_keep_their_own_module() -> None:
    device = types.SimpleNamespace(xp=stand_in_cupy({"to_device": [], "to_host": []}))
    assert array_module(device) == ArrayModule(device.xp, CUDA)  # type: ignore[arg-type]


@needs_device
def test_a_vulkan_device_names_its_uuid_and_lavapipe_validates_on_the_host(executor: Any, fresh_choice: None) -> None:
    uuid = executor.facts.properties["device_uuid"]
    assert len(uuid) == 32 and int(uuid, 16) > 0, uuid
    if executor.facts.properties["device_type"] == "cpu":  # no CUDA device has a CPU's UUID
        assert array_module(executor).label == HOST
    result = evaluate(executor, job(kernel(CORRECT_BODY), SIZES), lambda _: None)
    assert result.validation and result.validation.passed, result.validation
    assert result.validation.reference == array_module(executor).label
    assert result.validation.model_dump()["reference"] == result.validation.reference  # the record keeps it


@needs_device
def test_a_worker_process_chooses_once_and_its_verdict_says_where() -> None:
    """The real worker: it chooses before it is ready (no cupy or no CUDA twin of lavapipe here: the host), and
    every verdict carries the choice."""
    source = kernel(CORRECT_BODY)
    pool = DevicePool()
    try:
        result = pool.run("hlsl", 0, EvaluateJob.model_validate(job(source, SIZES)), inactivity_s=60, total_s=300)
    finally:
        pool.close()
    assert isinstance(result, EvaluateResult) and result.validation and result.validation.passed, result
    expected = evaluation.cuda_beside(result.device.properties.get("device_uuid")).label
    assert result.validation.reference == expected
    if result.device.properties.get("device_type") == "cpu":
        assert expected == HOST


# --- cupy beside Vulkan (a stand-in cupy) -----------------------------------------------------------------------


@needs_device
def test_cupy_beside_vulkan_validates_and_times_with_only_inputs_and_outputs_crossing(
        executor: Any, watched: dict[str, list[int]]) -> None:
    source = kernel(CORRECT_BODY)
    compiled = executor.compile(source, spec_of(source))
    module = ArrayModule(stand_in_cupy(watched), CUDA)
    validated = validate(executor, compiled, PROBLEM, "f32", SIZES, trials=3, seed=5, progress=lambda _: None,
                         module=module)
    try:
        assert validated.verdict.passed and validated.verdict.reference == CUDA, validated.verdict
        assert all(isinstance(s.refs["C"].values, DeviceArray) for s in validated.sets)
        assert watched["host_rows"] and len(watched["host_rows"]) == 1, "validation's host spot-check ran once"
        timing = benchmark(executor, compiled, PROBLEM, "f32", SIZES, validated, time_budget_s=0.05, min_reps=4,
                           max_reps=8, progress=lambda _: None)
    finally:
        validated.close()
    assert timing.recheck and timing.recheck.passed, timing.recheck
    assert len(watched["host_rows"]) == 1 + 2, "the recheck spot-checks each input set on the host"
    # Inputs go to Vulkan, bodies come back; poison (C's size) and guards (1 MiB and more) never cross.
    assert watched["to_host"] and max(watched["to_host"]) < C_BYTES, watched["to_host"]
    assert C_BYTES in watched["to_device"] and max(watched["to_device"]) < FRONT_GUARD_BYTES


@needs_device
@pytest.mark.parametrize("name", sorted(WRONG))
def test_cupy_beside_vulkan_catches_a_wrong_kernel(executor: Any, watched: dict[str, list[int]], name: str) -> None:
    source = WRONG[name]
    compiled = executor.compile(source, spec_of(source))
    validated = validate(executor, compiled, PROBLEM, "f32", SIZES, trials=3, seed=5, progress=lambda _: None,
                         module=ArrayModule(stand_in_cupy(watched), CUDA))
    validated.close()
    verdict = validated.verdict
    assert not verdict.passed and verdict.check == "wrong_result" and verdict.reference == CUDA, verdict


@needs_device
def test_a_wrong_gpu_reference_is_caught_by_the_host_spot_check(executor: Any, watched: dict[str, list[int]]) -> None:
    """A broken device BLAS must not become the yardstick: the reference disagrees with rows the host computes."""
    source = WRONG["one element off"]
    compiled = executor.compile(source, spec_of(source))
    with pytest.raises(ReferenceMismatch, match="disagrees with the host"):
        validate(executor, compiled, PROBLEM, "f32", SIZES, trials=3, seed=5, progress=lambda _: None,
                 module=ArrayModule(stand_in_cupy(watched, WrongMatmul), CUDA))
