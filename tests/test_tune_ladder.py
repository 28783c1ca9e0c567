"""tools/tune_ladder.py's source rewrites: the tuned configuration becomes the one submit_kernel compiles, and the
HIP twin of a CUDA kernel is the same kernel with HIP's names (it compiles for NVIDIA through the HIP header)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from peak_mcp.backends.base import CompileFailed
from peak_mcp.backends.hip_portability import hip_spelling
from peak_mcp.backends.registry import launch_spec, open_executor
from peak_mcp.core.launch import with_params
from peak_mcp.problems.matmul import Matmul

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from tune_ladder import LADDERS, default_first  # noqa: E402


def _spec(source: str, backend: str = "cuda"):
    return launch_spec(source, backend, Matmul.symbols)


def test_the_best_configuration_becomes_the_default() -> None:
    source = (ROOT / "examples/matmul/cuda/tuned/warptile.cu").read_text()
    best = {"BM": 256, "BN": 64, "BK": 8, "WM": 64, "WN": 32, "WMITER": 1, "WNITER": 2, "TM": 4, "TN": 8, "MINB": 1}
    rewritten = default_first(source, best)
    assert _spec(rewritten).config() == best
    assert _spec(rewritten).space_size() == _spec(source).space_size()  # same values, another order
    assert rewritten.replace(" ", "") != source.replace(" ", "") and rewritten.count("\n") == source.count("\n")


def test_every_ladder_kernel_exists_and_its_hip_twin_compiles_for_nvidia_unless_it_needs_cuda_wmma() -> None:
    hip = open_executor("hip", None, hip_arch="sm_90a")
    for key, steps in LADDERS.items():
        if key.startswith("hlsl-"):  # HLSL kernels have no HIP twin (tests/test_hlsl_backend.py runs them)
            continue
        for _transformation, path, _strategy, _configs in steps:
            twin = hip_spelling(path.read_text())
            assert "cuda_bf16.h" not in twin and "__nv_bfloat16" not in twin
            spec = _spec(twin, "hip")
            if "#include <mma.h>" in twin:  # nvcuda::wmma has no HIP spelling on NVIDIA (rocWMMA is AMD's)
                with pytest.raises(CompileFailed, match=r"<mma\.h>. is refused"):
                    hip.compile(with_params(twin, spec.config()), spec)
                continue
            assert hip.compile(with_params(twin, spec.config()), spec).resources["registers"] > 0, path


def test_the_landscape_is_every_configuration_the_store_kept(tmp_path) -> None:
    from tune_ladder import landscape

    from peak_mcp.core.config import Settings
    from peak_mcp.evaluation.configs import ConfigResult, TuneReport
    from peak_mcp.store.database import Store

    kernel = "examples/matmul/cuda/tuned/regblock.cu"
    ok = ConfigResult(params={"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8}, status="ok", median_ms=5.1)
    pruned = ConfigResult(params={"BM": 64, "BN": 64, "BK": 8, "TM": 16, "TN": 16}, status="pruned",
                          kind="where", reason="where ... is false")
    report = TuneReport(version=1, strategy="exhaustive", space_size=243, valid_size=176, tried=1, where_pruned=1,
                        pruned=[pruned], results=[ok], best=None, stopped="space exhausted")
    store = Store(Settings(data_dir=tmp_path).database)
    sid = store.create_session(problem="matmul", backend="cuda", dtype="f32", sizes={"M": 64, "N": 64, "K": 64},
                               device="H100", device_index=0, label=None)
    store.add_version(sid, source="x", origin="naive", status="benchmarked")
    store.add_version(sid, source="y", origin="apply", status="benchmarked", parent=0,
                      tuning=report.model_dump(mode="json"))
    store.close()
    out = {"session_id": sid, "device": "H100", "sizes": {"M": 64, "N": 64, "K": 64},
           "steps": [{"kernel": kernel, "version": 1, "tune": {"strategy": "exhaustive", "tried": 16}}]}
    table = landscape(tmp_path, out)
    assert table is not None and table["params"]["BM"] == [128, 64, 256] and len(table["where"]) == 2
    assert [(row["ms"], row["status"]) for row in table["table"]] == [(5.1, "ok"), (None, "pruned")]
    out["steps"][0]["tune"]["strategy"] = "optuna"  # only an exhaustive search is a whole landscape
    assert landscape(tmp_path, out) is None


def test_the_f32_ladder_can_start_at_a_step() -> None:
    from tune_ladder import steps

    assert [s[0] for s in steps("f32", "double-buffering")] == ["double-buffering", "cuda-cp-async", "warp-tiling",
                                                                "three-xtf32"]
    assert steps("f32") == LADDERS["f32"]
    with pytest.raises(SystemExit, match="three-xtf32"):
        steps("f32", "no-such-step")


def test_the_hopper_steps_follow_a_16_bit_ladder_and_their_kernels_and_texts_exist() -> None:
    from tune_ladder import HOPPER, steps

    from peak_mcp.catalog.transformations import Catalog, builtin_transformations_dir

    names = ["hopper-tma-pipeline", "hopper-warp-specialization", "hopper-persistent-gemm", "hopper-tma-multicast"]
    assert [s[0] for s in steps("bf16", "hopper-tma-pipeline", hopper=True)] == names
    assert steps("f16", hopper=True)[:len(LADDERS["f16"])] == LADDERS["f16"]
    assert "hopper-tma-pipeline" not in [s[0] for s in steps("bf16")]  # only with --hopper
    with pytest.raises(SystemExit, match="f16, bf16"):
        steps("f32", hopper=True)
    catalog = Catalog.load(builtin_transformations_dir())
    for ladder in HOPPER.values():
        for name, path, _strategy, _configs in ladder:
            assert path.is_file() and name in catalog, (name, path)


def test_the_table_shows_the_tuned_share_beside_the_default_one() -> None:
    from tune_ladder import table

    out = {"steps": [{"step": "double-buffering", "default": {"median_ms": 3.2, "tflops": 43.3, "pct_of_vendor": 84.0}},
                     {"step": "cuda-cp-async", "default": {"median_ms": 2.9, "pct_of_vendor": 90.9},
                      "tuned": {"median_ms": 3.0, "tflops": 45.1, "pct_of_vendor": 87.5},
                      "tune": {"configs_per_min": 132.6, "devices": [0]}}]}
    first, second = table(out)
    assert "84.0 % of vendor" in first and "default" not in first and "configs/min" not in first
    assert "87.5 % of vendor (default 90.9 %)  132.6 configs/min on devices [0]" in second


def test_the_hlsl_ladder_applies_hlsl_texts_with_hlsl_kernels() -> None:
    from tune_ladder import steps

    from peak_mcp.catalog.transformations import Catalog, builtin_transformations_dir

    catalog = Catalog.load(builtin_transformations_dir())
    ladder = steps("hlsl-f32", "register-blocking-2d")
    assert [s[0] for s in ladder] == ["register-blocking-2d", "double-buffering", "hlsl-wave-tiling",
                                      "tile-size-tuning", "vectorized-loads", "edge-tile-specialization",
                                      "grid-rasterization"]
    for transformation, path, strategy, _configs in LADDERS["hlsl-f32"]:
        assert "hlsl" in catalog.get(transformation).backends and path.suffix == ".hlsl", transformation
        spec = _spec(path.read_text(), "hlsl")
        assert (strategy == "none") == (not spec.params), path  # every tunable step is tuned
