"""Settings: one validated object from the environment; workers get theirs explicitly."""

from __future__ import annotations

from pathlib import Path

import pytest

from peak_mcp.core.config import Settings
from peak_mcp.core.errors import InvalidInput
from peak_mcp.runner.messages import EvaluateJob
from peak_mcp.runner.pool import DevicePool
from peak_mcp.runner.replies import EvaluateResult


def test_environment_names_and_types(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PEAK_MCP_DATA_DIR", str(tmp_path / "d"))
    monkeypatch.setenv("PEAK_MCP_JOB_TIMEOUT", "12.5")
    monkeypatch.setenv("PEAK_MCP_TRANSFORMATIONS", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    monkeypatch.setenv("PEAK_MCP_SANITIZER", "off")
    monkeypatch.setenv("PEAK_CUDA_ARCH", "sm_80")
    s = Settings.from_env()
    assert s.data_dir == tmp_path / "d" and s.database == tmp_path / "d" / "peak.sqlite3"
    assert s.inactivity_timeout_s == 12.5 and s.sanitizer is False and s.cuda_arch == "sm_80"
    assert s.extra_catalog_dirs == [tmp_path / "a", tmp_path / "b"]
    assert Settings.from_env(tmp_path / "cli").data_dir == tmp_path / "cli"  # the command line wins


@pytest.mark.parametrize(("name", "value"), [("PEAK_MCP_JOB_TIMEOUT", "soon"), ("PEAK_MCP_JOB_TIMEOUT", "-1"),
                                             ("PEAK_MCP_BENCH_SECONDS", "600"), ("PEAK_CUDA_ARCH", "../x")])
def test_a_bad_value_names_its_variable(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(InvalidInput, match=name):
        Settings.from_env()


def test_assignment_is_validated(tmp_path: Path) -> None:
    s = Settings(data_dir=tmp_path)
    with pytest.raises(ValueError):
        s.inactivity_timeout_s = 0


def test_the_compile_only_cuda_worker_gets_the_configured_arch(tmp_path: Path) -> None:
    """Through a real worker process: the arch comes from the settings, not from the worker's environment."""
    settings = Settings(data_dir=tmp_path, cuda_arch="sm_80")
    pool = DevicePool(env={}, options=settings.worker_options)
    source = ('// peak: entry=k grid=(1, 1, 1) block=(32, 1, 1)\n'
              'extern "C" __global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {}\n')
    from peak_mcp.core.launch import parse_annotation

    spec = parse_annotation(source, needs=("entry", "grid", "block"), symbols=("M", "N", "K"))
    try:
        result = pool.run("cuda", -1, EvaluateJob(problem="matmul", dtype="f32", sizes={"M": 8, "N": 8, "K": 8},
                                                  source=source, spec=spec.model_dump(), steps=["compile"]),
                          inactivity_s=60, total_s=120)
    finally:
        pool.close()
    assert isinstance(result, EvaluateResult) and result.compile and result.compile.ok, result
    assert result.compile.resources["arch"] == "sm_80"


def test_server_json_declares_every_setting() -> None:
    import json

    from peak_mcp.core.config import _variable

    declared = {v["name"] for v in json.loads((Path(__file__).parent.parent / "server.json").read_text())
                ["packages"][0]["environmentVariables"]}
    assert {_variable((name,)) for name in Settings.model_fields} | {"PEAK_MCP_TOKEN"} == declared
