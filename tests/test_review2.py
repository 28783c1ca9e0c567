"""Hostile review 2: attacks on today's surfaces (the include sandbox after the `#line` relaxation, the HIP
compilers, tune, profile, export, settings, lean responses) that found defects; each test failed before its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from peak_mcp.backends.base import CompileFailed
from peak_mcp.backends.cuda import CudaExecutor
from peak_mcp.backends.hip_portability import include_refusal_log
from peak_mcp.backends.includes import check_source
from peak_mcp.cli import export_version
from peak_mcp.config import Settings
from peak_mcp.errors import InvalidInput
from peak_mcp.launch import parse_annotation

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
