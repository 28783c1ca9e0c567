"""Issue 34: a torch yardstick pinned to one backend flattered a kernel (SDPA on flash ran at 340 TFLOP/s on an H200
where its default, cuDNN, ran at 624). torch is now timed on its default path and on every backend the problem's
traits say it has, and the fastest is the yardstick, named, with the others beside it. Here on the CPU: the paths
run (or say why not), the fastest is the one reported, and a problem host can claim no path it was not asked for."""

from __future__ import annotations

import functools
import socket
import threading
from typing import Any

import numpy as np
import pytest

from peak_mcp.evaluation import torch_paths, yardsticks
from peak_mcp.runner import jobs, problem_wire
from peak_mcp.runner.problem_link import RemoteCode


def test_paths_follow_the_traits() -> None:
    assert torch_paths.paths_for(["row_reduction"]) == ("default",)
    assert torch_paths.paths_for(["attention", "softmax"]) == ("sdpa flash", "sdpa cudnn", "sdpa efficient",
                                                               "default")
    # cudnn benchmark before anything that would cache cuDNN's heuristic plan (its cache key leaves the flag out)
    assert torch_paths.paths_for(["fused_epilogue", "convolution"]) == ("cudnn benchmark", "cudnn heuristic",
                                                                        "default")
    assert torch_paths.known(["sdpa cudnn", "rm -rf /", 3, "default"]) == ("sdpa cudnn", "default")


@pytest.fixture(scope="module")
def torch() -> Any:
    return pytest.importorskip("torch")


@pytest.fixture
def eager_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.compile through dynamo's eager backend: the compile path without a C++ build on this CPU."""
    real = yardsticks.time_torch
    monkeypatch.setattr(yardsticks, "time_torch",
                        lambda *a, compile, **k: real(*a, compile=compile, **k,
                                                      **({"compile_backend": "eager"} if compile else {})))
    monkeypatch.setattr(jobs, "TORCH_BUDGET_S", 0.1)


def test_attention_is_timed_on_each_sdpa_backend_and_the_fastest_named(torch: Any, eager_compile: None) -> None:
    q, k, v = (np.random.default_rng(i).standard_normal((1, 2, 64, 32)).astype(np.float32) for i in range(3))
    sdpa = functools.partial(torch.nn.functional.scaled_dot_product_attention, is_causal=True)
    heard: list[str] = []
    out = jobs.torch_timings(sdpa, [q, k, v], "f32", 1.0, heard.append, torch_paths.paths_for(["attention"]))
    by_path = out["torch_eager_paths"]
    assert set(by_path) == {"default", "sdpa flash", "sdpa cudnn", "sdpa efficient"}
    timed = {p: ms for p, ms in by_path.items() if isinstance(ms, float)}
    assert "default" in timed and out["torch_eager_ms"] == min(timed.values())
    assert out["torch_eager_path"] == min(timed, key=timed.__getitem__)
    assert all(ms.startswith("unavailable: ") for ms in by_path.values() if isinstance(ms, str))
    assert isinstance(by_path["sdpa cudnn"], str)  # no cuDNN attention on a CPU: said, not timed
    assert "yardsticks: torch eager (sdpa cudnn)" in heard and out["torch_compile_ms"] > 0


def test_a_convolution_is_timed_with_cudnn_benchmark_on_and_off_and_the_flag_restored(torch: Any,
                                                                                     eager_compile: None) -> None:
    seen: list[bool] = []

    def conv(x: Any, w: Any) -> Any:
        seen.append(torch.backends.cudnn.benchmark)
        return torch.nn.functional.conv2d(x, w, padding=1)

    x = np.random.default_rng(0).standard_normal((1, 4, 16, 16)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((8, 4, 3, 3)).astype(np.float32)
    before = torch.backends.cudnn.benchmark
    out = jobs.torch_timings(conv, [x, w], "f32", 1.0, lambda _: None, torch_paths.paths_for(["convolution"]))
    assert torch.backends.cudnn.benchmark == before
    assert True in seen and False in seen  # both settings ran
    assert set(out["torch_eager_paths"]) == {"default", "cudnn benchmark", "cudnn heuristic"}


def test_one_path_keeps_the_old_answer(torch: Any, eager_compile: None) -> None:
    out = jobs.torch_timings(lambda a: a * 2, [np.ones(64, np.float32)], "f32", 1.0, lambda _: None)
    assert out["torch_eager_ms"] > 0 and "torch_eager_path" not in out and "torch_eager_paths" not in out


def test_a_problem_host_cannot_claim_a_path_it_was_not_asked_for(tmp_path: Any) -> None:
    """The host's answer is untrusted: a path the worker did not ask for, and values that are not times, go."""
    from peak_mcp.problems.declaration import ProblemDeclaration

    worker, host = socket.socketpair()

    def serve() -> None:
        problem_wire.send(host, {"parameters": {}, "xp": "numpy"})
        problem_wire.receive(host, 1 << 20)
        problem_wire.send(host, {"timings": {
            "torch_eager_ms": 0.001, "torch_eager_path": "sdpa flash",  # lies: the server reads the paths' times
            "torch_eager_paths": {"default": 0.9, "sdpa cudnn": 0.5, "sdpa flash": "unavailable: \x1b[2Jx",
                                  "evil": 0.001}}})

    thread = threading.Thread(target=serve)
    thread.start()
    declaration = ProblemDeclaration.model_construct(path=str(tmp_path / "p.py"))
    code = RemoteCode(worker, declaration)
    out = code.torch_timings([], {}, "f16", 1.0, ("sdpa flash", "sdpa cudnn", "default"))
    thread.join()
    assert out["torch_eager_path"] == "sdpa cudnn" and out["torch_eager_ms"] == 0.5
    assert "evil" not in out["torch_eager_paths"]
    assert "\x1b" not in out["torch_eager_paths"]["sdpa flash"]
    worker2, host2 = socket.socketpair()
    host, worker = host2, worker2
    thread = threading.Thread(target=serve)
    thread.start()
    out = RemoteCode(worker, declaration).torch_timings([], {}, "f16", 1.0, ("default",))
    thread.join()
    assert "torch_eager_path" not in out and out["torch_eager_ms"] == 0.001  # one path: its time, as with no paths


def test_the_answer_names_the_path_and_the_others() -> None:
    from peak_mcp.api.summaries import yardstick

    lines = yardstick({"available": False, "reason": "none", "torch_eager_ms": 0.45, "torch_eager_path": "sdpa cudnn",
                       "torch_eager_paths": {"default": 0.45, "sdpa flash": 0.8, "sdpa cudnn": 0.45,
                                             "sdpa efficient": "unavailable: no kernel"}})
    said = next(line for line in lines if line.startswith("torch yardsticks"))
    assert "eager 0.45 ms" in said and "sdpa cudnn path, the fastest" in said
    assert "sdpa flash 0.8 ms" in said and "sdpa efficient unavailable" in said
