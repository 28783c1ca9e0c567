"""Hostile review 2: attacks on today's surfaces (the include sandbox after the `#line` relaxation, the HIP
compilers, tune, profile, export, settings, lean responses) that found defects; each test failed before its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from peak_mcp.api.cli import export_version
from peak_mcp.backends import amd_offline
from peak_mcp.backends.base import CompileFailed
from peak_mcp.backends.cuda import CudaExecutor
from peak_mcp.backends.hip_portability import include_refusal_log
from peak_mcp.backends.includes import check_source
from peak_mcp.core.config import Settings
from peak_mcp.core.errors import AnnotationError, InvalidInput
from peak_mcp.core.launch import parse_annotation

CUDA_TAIL = ("// peak: entry=k grid=(1, 1, 1) block=(1, 1, 1) shared=0\n"
             'extern "C" __global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {}\n')
# A host file whose content is a number: included as a template argument, the type NVRTC names in its error
# carries it into the reply (this read /proc/sys/kernel/pid_max before the fix).
SECRET = "/proc/sys/kernel/pid_max"
EXFILTRATE = "template<int N> struct S;\n__device__ S<\n#inc\\\nlude \"" + SECRET + "\"\n> s2;\n"
# Ways to make the comment stripper disagree with the compiler about where a comment is.
FOOLS = {
    # C++11 raw string: the stripper closes the string early and takes `/*` for a comment that runs on.
    "raw_string": '#define STR(x) #x\n__device__ const char* s = STR(R"x()"/*)x");\n' + EXFILTRATE,
    # C++14 digit separator: the stripper takes `'` for a character literal and misses the comment that the
    # directive follows.
    "digit_separator": "__device__ const int q = 1'000; /*\n*/ #include \"" + SECRET + "\"\n",
    "digit_separator_spliced": "__device__ const int q = 1'000; /*\n*/ #inc\\\nlude \"" + SECRET + "\"\n",
}


@pytest.mark.parametrize("name", sorted(FOOLS))
def test_a_fooled_comment_stripper_does_not_let_an_include_through(name: str) -> None:
    source = FOOLS[name] + CUDA_TAIL
    executor = CudaExecutor(None)
    refused = check_source(source, executor.sandbox_dirs())
    assert any(SECRET in r.what for r in refused), refused
    assert include_refusal_log(source) is not None  # HIP (NVRTC and offline clang) shares the sandbox
    spec = parse_annotation(source, needs=("entry", "grid", "block"), symbols=("M", "N", "K"))
    with pytest.raises(CompileFailed) as failed:
        executor.compile(source, spec)
    value = Path(SECRET).read_text().strip()
    assert f"S<{value}>" not in str(failed.value) and "refused" in str(failed.value)


def test_bare_line_numbers_are_still_accepted() -> None:
    assert check_source("#line 1\n#line\t42\t\n" + CUDA_TAIL, CudaExecutor(None).sandbox_dirs()) == []


@pytest.mark.parametrize("value", ["inf", "1e300"])
def test_an_unbounded_vulkan_fence_timeout_is_a_clear_settings_error(monkeypatch: pytest.MonkeyPatch,
                                                                     value: str) -> None:
    # Before: accepted, then int(inf * 1e9) for vkWaitForFences raised OverflowError in the worker on every wait.
    monkeypatch.setenv("PEAK_MCP_VK_FENCE_TIMEOUT_S", value)
    with pytest.raises(InvalidInput, match="PEAK_MCP_VK_FENCE_TIMEOUT_S"):
        Settings.from_env()


@pytest.mark.parametrize("version", ["²", "١٢", "3\u0663"])
def test_export_refuses_a_non_ascii_digit_version_with_a_usage_error(tmp_path: Path, version: str) -> None:
    # Before: "²".isdigit() let it through to int(), and the CLI died with a ValueError traceback.
    with pytest.raises(InvalidInput, match="is not a number"):
        export_version(None, "0123456789ab", version, tmp_path / "out")
    assert not (tmp_path / "out").exists()


AMD = amd_offline.find_toolchain()
needs_amd = pytest.mark.skipif(AMD is None, reason="no AMD offline HIP compiler")
HIP_TAIL = CUDA_TAIL


@pytest.mark.parametrize("pragma", ["#pragma clang __debug crash", "#  pragma  clang __debug overflow_stack",
                                    "#pragma clang __debug dump g"])
def test_clang_debug_pragmas_are_refused(pragma: str) -> None:
    log = include_refusal_log(pragma + "\n" + HIP_TAIL)
    assert log is not None and "__debug" in log


def test_a_clang_crash_report_is_withheld() -> None:
    # What clang-15 printed for `#pragma clang __debug crash` before the sandbox refused it (shortened).
    stderr = ("PLEASE submit a bug report to https://github.com/llvm/llvm-project/issues/ and include the crash "
              "backtrace.\nStack dump:\n0.\tProgram arguments: /usr/bin/clang++-15 -x hip --rocm-path=/usr "
              "kernel.hip\n1.\tkernel.hip:1:23: at annotation token\nclang: note: diagnostic msg: "
              "/tmp/peak-hip-x/kernel-1.hip\n")
    kept = amd_offline._without_crash_dump("kernel.hip:3:1: warning: w\n" + stderr)
    assert "warning: w" in kept and "crashed" in kept
    assert "/usr" not in kept and "/tmp" not in kept and "Program arguments" not in kept


@needs_amd
def test_offline_clang_diagnostics_name_headers_without_host_paths() -> None:
    source = '__device__ int g() { return abs("s"); }\n' + HIP_TAIL
    spec = parse_annotation(source, needs=("entry", "grid", "block"), symbols=("M", "N", "K"))
    with pytest.raises(CompileFailed) as failed:
        amd_offline.AmdOfflineExecutor("gfx90a", AMD).compile(source, spec)
    log = str(failed.value)
    assert "candidate function" in log and "<clang>/" in log  # the header's diagnostics stay, by a short name
    assert not any(d in log for d in AMD.include_dirs()) and "/usr/" not in log


def test_where_lines_are_capped() -> None:
    # Before: any number of 800-character where lines, each evaluated for all 100,000 configurations of a space
    # while tune builds it (about 5 s per complex line), before budget_s is ever checked.
    where = "// peak: where=A + B + A + B + A + B + A + B >= 0 and max(A, B, A, B) + min(A, B) * (A // 3) % 7 >= 0\n"
    source = ("// peak: entry=k grid=(1, 1, 1) block=(A, 1, 1)\n// peak: params A=range(1, 1001) B=range(0, 100)\n"
              + where * 40 + 'extern "C" __global__ void k() {}\n')
    with pytest.raises(AnnotationError, match="more than 8 `where` lines"):
        parse_annotation(source, needs=("entry", "grid", "block"), symbols=("M", "N", "K"))
    capped = source.replace(where * 40, where * 8)
    assert len(parse_annotation(capped, needs=("entry", "grid", "block"), symbols=("M", "N", "K")).where) == 8
