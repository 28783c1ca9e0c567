"""The HIP backend without a GPU: HIP on CUDA through the device header (NVRTC compiles for real), AMD-only code
refused before NVRTC, the include sandbox, the offline AMD compile (resources from clang's remarks) and how a
compile-only session picks its target."""

from __future__ import annotations

import numpy as np
import pytest

from peak_mcp.backends import amd_offline, hip, hip_amd
from peak_mcp.backends.base import CompileFailed
from peak_mcp.backends.hip_portability import amd_only_constructs
from peak_mcp.backends.registry import launch_spec
from peak_mcp.core.devices import describe, load_profiles
from peak_mcp.core.launch import LaunchSpec
from peak_mcp.problems.matmul import Matmul
from tests.conftest import EXAMPLES

HIP_EXAMPLES = sorted((EXAMPLES / "hip").glob("*.hip"))
PORTABLE = [p for p in HIP_EXAMPLES if p.name != "mfma_f32.hip"]
needs_amd_compiler = pytest.mark.skipif(amd_offline.find_toolchain() is None,
                                        reason=f"no AMD HIP compiler: {amd_offline.INSTALL_HINT}")

# HIP's own kernel API, every name the device header maps: indices, dynamic shared memory, mask-free warp
# functions, 16-bit types, HIP's atomics.
HIP_API = """// peak: entry=k grid=(1, 1, 1) block=(64, 1, 1) shared=256
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bfloat16.h>
extern "C" __global__ void __launch_bounds__(64) k(const __half* A, const hip_bfloat16* B, float* C, int M, int N,
                                                   int K) {
    HIP_DYNAMIC_SHARED(float, smem)
    int t = hipThreadIdx_x + hipBlockIdx_x * hipBlockDim_x + hipGridDim_x * 0;
    float v = __half2float(A[t]) + static_cast<float>(B[t]);
    v += __shfl(v, 0) + __shfl_up(v, 1) + __shfl_down(v, 1, 16) + __shfl_xor(v, 2);
    int w = __shfl_xor(t, 1);
    unsigned long long b = __ballot(v > 0.f);
    smem[t] = v + (float)w + (float)__popcll(b) + (__any(v > 1.f) ? 1.f : 0.f) + (__all(v > 1.f) ? 1.f : 0.f)
              + (float)__lane_id();
    __syncthreads();
    unsafeAtomicAdd(&C[0], smem[t ^ 1]);
    atomicAddNoRet(&C[1], 1.0f);
    atomicAdd(&C[2], 1.0f);
}
"""


def _spec(source: str) -> LaunchSpec:
    return launch_spec(source, "hip", Matmul.symbols)


@pytest.fixture(scope="module")
def nvidia() -> hip.HipOnCudaExecutor:
    return hip.HipOnCudaExecutor(None, arch="sm_90a")


@pytest.fixture(scope="module")
def amd() -> amd_offline.AmdOfflineExecutor:
    if amd_offline.find_toolchain() is None:
        pytest.skip(f"no AMD HIP compiler: {amd_offline.INSTALL_HINT}")
    return amd_offline.AmdOfflineExecutor("gfx90a")


# --- HIP on NVIDIA ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", PORTABLE, ids=lambda p: p.name)
def test_portable_examples_compile_for_nvidia_without_spills(nvidia, path) -> None:
    compiled = nvidia.compile(path.read_text(), _spec(path.read_text()))
    assert compiled.resources["registers"] > 0 and compiled.resources["arch"] == "sm_90a"
    assert compiled.resources.get("spill_store_bytes", 0) == 0


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_naive_kernel_compiles_on_both_platforms(nvidia, dtype) -> None:
    source = Matmul().naive_kernel("hip", dtype)
    assert {"f32": "const float* A", "f16": "const __half* A", "bf16": "const hip_bfloat16* A"}[dtype] in source
    assert nvidia.compile(source, _spec(source)).resources["registers"] > 0
    if amd_offline.find_toolchain() is not None:
        assert amd_offline.AmdOfflineExecutor("gfx90a").compile(source, _spec(source)).resources["vgprs"] > 0


def test_the_device_header_maps_hips_kernel_api_onto_cuda(nvidia) -> None:
    compiled = nvidia.compile(HIP_API, _spec(HIP_API))
    assert compiled.resources["registers"] > 0
    # The runtime header is there without an #include, as under hipcc and hiprtc.
    bare = HIP_API.replace("#include <hip/hip_runtime.h>\n", "")
    assert nvidia.compile(bare, _spec(bare)).resources["registers"] > 0


def test_compile_errors_name_the_hip_file_and_line(nvidia) -> None:
    source = Matmul().naive_kernel("hip", "f32").replace("acc += ", "acc += undeclared_name + ")
    line = next(n for n, text in enumerate(source.splitlines(), 1) if "undeclared_name" in text)
    with pytest.raises(CompileFailed) as failed:
        nvidia.compile(source, _spec(source))
    assert f"kernel.hip({line})" in failed.value.log and "undeclared_name" in failed.value.log


def test_amd_only_code_is_refused_for_nvidia_with_every_line(nvidia) -> None:
    source = (EXAMPLES / "hip" / "mfma_f32.hip").read_text()
    source = source.replace("#define WAVE 64", "#define WAVE __AMDGCN_WAVEFRONT_SIZE")
    with pytest.raises(CompileFailed) as failed:
        nvidia.compile(source, _spec(source))
    log = failed.value.log
    mfma_line = next(n for n, t in enumerate(source.splitlines(), 1) if "__builtin_amdgcn_mfma" in t)
    wave_line = next(n for n, t in enumerate(source.splitlines(), 1) if "__AMDGCN_WAVEFRONT_SIZE" in t)
    assert f"kernel.hip:{mfma_line}: error: `__builtin_amdgcn_mfma_f32_16x16x4f32` is an AMD matrix-core" in log
    assert f"kernel.hip:{wave_line}: error: `__AMDGCN_WAVEFRONT_SIZE`" in log
    assert "AMD-only, cannot compile for NVIDIA (sm_90a)" in log and "__HIP_PLATFORM_AMD__" in log


@pytest.mark.parametrize(("code", "expected"), [
    ("x = __builtin_amdgcn_readfirstlane(x);", "an AMD GCN builtin"),
    ("static_assert(warpSize == 64, \"wave64\");", "64-lane waves"),
    ("asm volatile(\"v_mov_b32 %0, 0\" : \"=v\"(x));", "GCN inline assembly"),
    ("float y = __ocml_exp_f32(1.0f);", "AMD device library"),
    ("__attribute__((amdgpu_waves_per_eu(2)))", "amdgpu attribute"),
])
def test_each_kind_of_amd_only_construct_is_named(code: str, expected: str) -> None:
    refusals = amd_only_constructs(f"int f(int x) {{\n  {code}\n  return x;\n}}\n")
    assert [r.line for r in refusals] == [2] and expected in refusals[0].what


def test_amd_code_behind_a_platform_guard_and_in_comments_is_left_alone() -> None:
    portable = """// uses __builtin_amdgcn_mfma_f32_16x16x4f32 on AMD
#if defined(__HIP_PLATFORM_AMD__)
  acc = __builtin_amdgcn_mfma_f32_16x16x4f32(a, b, acc, 0, 0, 0);
#elif 1
  acc = fallback(a, b, acc);
#endif
#ifdef __AMDGCN_WAVEFRONT_SIZE
  #if __AMDGCN_WAVEFRONT_SIZE == 64
  int w = __AMDGCN_WAVEFRONT_SIZE;
  #endif
#else
  int w = 32;
#endif
/* __builtin_amdgcn_s_barrier(); */
  x = __builtin_amdgcn_ds_bpermute(a, b);
"""
    assert [r.line for r in amd_only_constructs(portable)] == [15]


@pytest.mark.parametrize(("include", "allowed"), [
    ("<hip/hip_runtime.h>", True), ("<hip/hip_fp16.h>", True), ("\"hip/hip_bfloat16.h\"", True),
    ("<hip/hip_bf16.h>", True),
    ("<cuda_fp16.h>", False), ("<stdio.h>", False), ("\"/etc/passwd\"", False), ("<hip/../../includes.py>", False),
])
def test_hip_kernels_may_include_hip_headers_only(nvidia, include: str, allowed: bool) -> None:
    source = f"#include {include}\n" + Matmul().naive_kernel("hip", "f32")
    # The AMD compile takes seconds: it checks every refusal but only one of the allowed headers.
    with_amd = amd_offline.find_toolchain() is not None and (not allowed or "fp16" in include)
    executors = [nvidia] + ([amd_offline.AmdOfflineExecutor("gfx90a")] if with_amd else [])
    for executor in executors:
        if allowed:
            assert executor.compile(source, _spec(source)).resources
        else:
            with pytest.raises(CompileFailed) as failed:
                executor.compile(source, _spec(source))
            assert "kernel.hip:1: error:" in failed.value.log and "only HIP headers can be included" in \
                failed.value.log and "cuda_fp16" not in failed.value.log.replace(include, "")


# --- offline AMD compile ---------------------------------------------------------------------------------------

@needs_amd_compiler
def test_mfma_example_reports_gfx90a_resources(amd) -> None:
    source = (EXAMPLES / "hip" / "mfma_f32.hip").read_text()
    resources = amd.compile(source, _spec(source)).resources
    assert resources["arch"] == "gfx90a" and resources["platform"] == "amd"
    assert resources["mfma_instructions"] >= 16  # 4 x 4 tiles per k step, unrolled
    assert resources["agprs"] > 0 and resources["vgprs"] > 0 and resources["sgprs"] > 0  # accumulators in AGPRs
    assert resources["registers"] == resources["vgprs"] + resources["agprs"]
    assert resources["lds_bytes"] == 2 * 128 * 17 * 4 == resources["static_shared_bytes"]
    assert 1 <= resources["occupancy_waves_per_simd"] <= 8
    assert resources["scratch_bytes"] == 0 and resources["vgpr_spills"] == 0 and resources["sgpr_spills"] == 0


@needs_amd_compiler
@pytest.mark.parametrize("path", PORTABLE, ids=lambda p: p.name)
def test_portable_examples_compile_for_gfx90a(amd, path) -> None:
    resources = amd.compile(path.read_text(), _spec(path.read_text())).resources
    assert resources["vgprs"] > 0 and resources["mfma_instructions"] == 0 and resources["vgpr_spills"] == 0


@needs_amd_compiler
def test_offline_compile_errors_keep_clangs_lines_and_drop_the_remarks(amd) -> None:
    source = (EXAMPLES / "hip" / "smem_tiled.hip").read_text().replace("acc += ", "acc += undeclared_name + ")
    line = next(n for n, text in enumerate(source.splitlines(), 1) if "undeclared_name" in text)
    with pytest.raises(CompileFailed) as failed:
        amd.compile(source, _spec(source))
    assert f"kernel.hip:{line}:" in failed.value.log and "undeclared identifier 'undeclared_name'" in failed.value.log
    assert "remark" not in failed.value.log
    ok = amd.compile(source.replace("undeclared_name + ", ""), _spec(source))
    assert "remark" not in ok.log and ok.resources["occupancy_waves_per_simd"] > 0


@needs_amd_compiler
def test_offline_compile_refuses_state_between_launches_and_a_missing_entry(amd) -> None:
    source = (EXAMPLES / "hip" / "smem_tiled.hip").read_text()
    stateful = source.replace('extern "C"', '__device__ int calls;\n__constant__ float scale[2] = {1.0f, 2.0f};\n'
                                            'extern "C"').replace("= acc;", "= acc * scale[1] + calls++;")
    with pytest.raises(CompileFailed, match="__device__ variable 'calls'"):
        amd.compile(stateful, _spec(stateful))
    constant_only = stateful.replace("__device__ int calls;\n", "").replace(" + calls++", "")
    assert amd.compile(constant_only, _spec(constant_only)).resources["vgprs"] > 0  # __constant__ is allowed
    renamed = source.replace("entry=matmul_tiled", "entry=missing")
    with pytest.raises(CompileFailed, match=r"entry 'missing'.*kernels: matmul_tiled"):
        amd.compile(renamed, _spec(renamed))


@needs_amd_compiler
def test_inline_assembly_is_never_assembled_so_incbin_reads_nothing(amd) -> None:
    source = (EXAMPLES / "hip" / "smem_tiled.hip").read_text().replace(
        "float acc = 0.0f;", 'float acc = 0.0f;\n    asm volatile(".incbin \\"/etc/hostname\\"");')
    compiled = amd.compile(source, _spec(source))  # with -c the assembler would read the file (and fail here)
    assert compiled.resources["vgprs"] > 0


@needs_amd_compiler
def test_targets_the_compiler_does_not_know_are_explained() -> None:
    chain = amd_offline.find_toolchain()
    assert amd_offline.target_problem(chain, "gfx90a") is None
    assert "not a gfx target" in amd_offline.target_problem(chain, "sm_90; rm -rf /")
    with pytest.raises(RuntimeError, match="cannot compile for gfx9999"):
        amd_offline.AmdOfflineExecutor("gfx9999")


@needs_amd_compiler
def test_geometry_is_checked_against_amd_limits(amd) -> None:
    source = (EXAMPLES / "hip" / "mfma_f32.hip").read_text()
    compiled = amd.compile(source, _spec(source))
    assert amd.check_geometry(compiled, {"grid": (1, 1, 1), "block": (256, 1, 1), "shared": 0}) is None
    assert "1024" in amd.check_geometry(compiled, {"grid": (1, 1, 1), "block": (2048, 1, 1), "shared": 0})
    assert "65536" in amd.check_geometry(compiled, {"grid": (1, 1, 1), "block": (256, 1, 1), "shared": 60000})
    with pytest.raises(RuntimeError, match="compile-only"):
        amd.alloc(16)


# --- target choice, probe, profiles ----------------------------------------------------------------------------

def test_compile_target_follows_peak_hip_arch_then_the_installed_compilers(monkeypatch) -> None:
    assert hip.compile_target("sm_80") == hip.Target("nvidia", "sm_80")
    executor = hip.open_executor(None, hip_arch="sm_80")
    assert isinstance(executor, hip.HipOnCudaExecutor) and executor.arch == "sm_80"
    assert executor.facts.name == "compile-only sm_80 (HIP on NVIDIA, no GPU)" and executor.facts.backend == "hip"
    assert hip.compile_target("gfx942") == hip.Target("amd", "gfx942")
    monkeypatch.setattr(amd_offline, "find_toolchain", lambda _named=None: None)
    assert hip.compile_target() == hip.Target("nvidia", hip.CUDA_DEFAULT_ARCH)
    report = hip.probe()
    assert report["compile_target"]["properties"] == {"arch": hip.CUDA_DEFAULT_ARCH, "platform": "nvidia",
                                                      "family": "hopper"}
    assert any(m["what"] == "AMD offline compiler" and "hipcc" in m["fix"] for m in report["missing"])


@needs_amd_compiler
def test_probe_without_a_gpu_targets_gfx90a_and_says_what_is_missing() -> None:
    report = hip.probe()
    assert report["devices"] == [] and report["compiler"]["available"]
    assert report["compile_target"]["name"] == "compile-only gfx90a (no AMD GPU)"
    assert report["compiler"]["amd_offline"]["targets"]["gfx90a"] is True
    missing = {m["what"]: m for m in report["missing"]}
    assert "pip install hip-python" in missing["hip-python"]["fix"]
    assert "not verified on AMD hardware" in missing["hip-python"]["why"]
    assert "compile here for gfx90a" in missing["HIP GPU"]["fix"]
    device = describe(report["compile_target"], load_profiles())
    assert device.profile == "mi250x.toml" and device.family == "cdna2" and device.arch == "gfx90a"
    assert device.peak_tflops["fp16_tensor"] > device.peak_tflops["fp32"] > 0
    assert isinstance(hip.open_executor(None), amd_offline.AmdOfflineExecutor)


def test_an_unknown_gfx_target_leaves_the_compile_only_session_unavailable() -> None:
    report = hip.probe(hip_arch="gfx9999")
    assert "compile_target" not in report
    assert report["compiler"]["available"] == bool(report["devices"])  # a GPU still runs HIP; no GPU, no target
    assert any(m["what"] == "HIP compiler for gfx9999" for m in report["missing"])


def test_amd_profiles_match_amd_device_names() -> None:
    profiles = load_profiles()
    for name, source, arch in [("AMD Instinct MI250X", "mi250x.toml", "gfx90a"),
                               ("AMD Instinct MI250", "mi250.toml", "gfx90a"),
                               ("AMD Instinct MI210", "mi210.toml", "gfx90a"),
                               ("AMD Instinct MI300X", "mi300x.toml", "gfx942")]:
        device = describe({"name": name}, profiles)
        assert (device.profile, device.arch, device.warp_size) == (source, arch, 64), name


def test_hip_python_absence_is_reported_not_raised() -> None:
    report = hip_amd.probe()
    if report["compiler"]["available"]:
        pytest.skip("hip-python is installed here")
    assert report["devices"] == [] and report["missing"][0]["fix"].startswith("pip install hip-python")
    assert hip_amd.device_count() == 0


def test_the_hipblas_yardstick_says_what_to_install_where_hip_python_is_missing() -> None:
    """On AMD the vendor baseline is hipBLAS through hip-python; without the module the session still starts and
    the baseline says why it is unavailable (the executor never raises for its yardstick)."""
    if hip_amd.probe()["compiler"]["available"]:
        pytest.skip("hip-python is installed here")
    executor = object.__new__(hip_amd.HipAmdExecutor)  # no AMD GPU here: only the baseline's import path runs
    inputs = {"A": np.ones(4, np.float32), "B": np.ones(4, np.float32)}
    baseline = executor.baseline("gemm", "f32", {"M": 2, "N": 2, "K": 2}, inputs, 0.1)
    assert baseline["available"] is False and "hipblas" in baseline["reason"] and "pip install hip-python" in \
        baseline["reason"]
    other = executor.baseline("softmax", "f32", {}, {}, 0.1)  # a yardstick HIP does not have
    assert other["available"] is False and "softmax" in other["reason"]


def test_the_hip_abi_names_hip_types_and_headers() -> None:
    abi = Matmul().abi("hip", "bf16")
    assert abi.splitlines()[1] == ('extern "C" __global__ void <entry>(const hip_bfloat16* A, const hip_bfloat16* B, '
                                   'float* C, int M, int N, int K)')
    assert "<hip/hip_bfloat16.h>" in abi and "__HIP_PLATFORM_AMD__" in abi
    assert "hip_" not in Matmul().abi("cuda", "bf16")
