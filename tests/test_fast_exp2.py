"""The fast-exp2 step (issue 37): softmax's ladder ends in it, its kernel's exponentials are one MUFU.EX2 each where
the step before has four instructions, and suggest_next reads the step as done from the code."""

from __future__ import annotations

import collections
import importlib.util
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from peak_mcp.backends import cuda as cuda_backend
from peak_mcp.backends.registry import launch_spec
from peak_mcp.catalog.features import source_features
from peak_mcp.catalog.transformations import Catalog, builtin_transformations_dir
from peak_mcp.core.launch import with_params

ROOT = Path(__file__).resolve().parent.parent
SOFTMAX = ROOT / "examples" / "softmax" / "cuda"


def _sass(source: str) -> str:
    spec = importlib.util.find_spec("nvidia")
    wheels = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    nvdisasm = shutil.which("nvdisasm") or next((str(p) for w in wheels for p in w.glob("cu*/bin/nvdisasm")), None)
    if nvdisasm is None:
        pytest.skip("no nvdisasm")
    source = source.replace("typedef float T;", "typedef __nv_bfloat16 T;")
    spec = launch_spec(source, "cuda", ("ROWS", "COLS"))
    binary = cuda_backend.CudaExecutor(None, arch="sm_90a").compile(with_params(source, spec.config()), spec).binary
    path = Path(tempfile.mkdtemp()) / "k.cubin"
    path.write_bytes(binary)
    return subprocess.run([nvdisasm, "-c", str(path)], capture_output=True, text=True, check=True).stdout


def _opcodes(source: str) -> collections.Counter[str]:
    return collections.Counter(op.split(".")[0] for op in
                               re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", _sass(source)))


def test_profiles_instruction_mix_counts_what_the_text_says_to_count() -> None:
    """fast-exp2 tells an agent to count FSETP and MUFU.EX2 in profile's instruction mix (agent 48: they were not
    in its ops, only the FMUL/FADD/FFMA family)."""
    from peak_mcp.evaluation.profiling.sass import sass_mix

    before = sass_mix(_sass((SOFTMAX / "7_cache_hints.cu").read_text())).ops
    after = sass_mix(_sass((SOFTMAX / "8_fast_exp2.cu").read_text())).ops
    assert before["MUFU.EX2"] == after["MUFU.EX2"] > 100
    assert before["FSETP"] > 100 and after.get("FSETP", 0) <= 2


def test_the_flush_takes_the_compare_and_multiplies_out_of_every_exponential() -> None:
    before = _opcodes((SOFTMAX / "7_cache_hints.cu").read_text())
    after = _opcodes((SOFTMAX / "8_fast_exp2.cu").read_text())
    assert before["MUFU"] == after["MUFU"] > 100  # the same exponentials
    assert before["FSETP"] >= before["MUFU"] - 10 and after["FSETP"] <= 2  # exp2f's denormal test, gone
    assert sum(after.values()) < 0.8 * sum(before.values())


def test_the_step_is_read_from_the_code_and_offered_to_softmax() -> None:
    step8 = (SOFTMAX / "8_fast_exp2.cu").read_text()
    assert "fast-exp2" in source_features(step8).get("flushing exp2", ())
    assert "flushing exp2" not in source_features((SOFTMAX / "7_cache_hints.cu").read_text())
    assert "flushing exp2" not in source_features("// uses ex2.approx.ftz in a comment only\n")
    text = Catalog.load(builtin_transformations_dir()).get("fast-exp2")
    assert set(text.backends) == {"cuda", "hip"} and "softmax" in text.traits


def _amd_opcodes(source: str) -> collections.Counter[str]:
    """The HIP twin's GCN assembly for gfx90a at bf16 (clang's HIP device compile, as amd_offline runs it)."""
    from peak_mcp.backends import amd_offline

    chain = amd_offline.find_toolchain()
    if chain is None:
        pytest.skip(f"no AMD HIP compiler: {amd_offline.INSTALL_HINT}")
    source = source.replace("typedef float T;", "typedef hip_bfloat16 T;")
    spec = launch_spec(source, "hip", ("ROWS", "COLS"))
    work = Path(tempfile.mkdtemp())
    (work / "k.hip").write_text(with_params(source, spec.config()))
    subprocess.run([*chain.base_args("gfx90a"), "-S", "-O3", "-std=c++17", "-include", "hip/hip_runtime.h",
                    "-o", str(work / "k.s"), str(work / "k.hip")], check=True, capture_output=True, timeout=300)
    return collections.Counter(re.findall(r"^\s+(v_[a-z0-9_]+)", (work / "k.s").read_text(), re.M))


def test_on_amd_the_flush_takes_the_denormal_scaling_out_of_every_exponential() -> None:
    # exp2f on AMD keeps denormal results as on NVIDIA: a compare, two selects, an add and a multiply around each
    # v_exp_f32; the step's helper must leave v_exp_f32 alone there too, or the step does nothing on AMD
    hip = ROOT / "examples" / "softmax" / "hip"
    before = _amd_opcodes((hip / "7_cache_hints.hip").read_text())
    after = _amd_opcodes((hip / "8_fast_exp2.hip").read_text())
    exps = after["v_exp_f32_e32"] + after["v_exp_f32"]
    assert exps >= after["v_sub_f32_e32"] > 100  # one per (x - max): every exponential is there
    compares = [before[f"v_cmp_gt_f32_{e}"] + after[f"v_cmp_gt_f32_{e}"] for e in ("e32", "e64")]
    assert sum(compares) >= before["v_exp_f32_e32"] and not after["v_cmp_gt_f32_e32"] + after["v_cmp_gt_f32_e64"]
    assert sum(after.values()) < 0.8 * sum(before.values())
