"""The include sandbox: hostile #include and friends are refused before any compiler runs, on CUDA (NVRTC,
compile only) and HLSL (glslang), at the backend and through a real MCP client; no other file's text comes back."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from peak_mcp.backends import hlsl
from peak_mcp.backends.base import CompileFailed
from peak_mcp.backends.cuda import CudaExecutor
from peak_mcp.backends.includes import check_source, sanitize_log
from peak_mcp.backends.registry import launch_spec
from peak_mcp.problems.matmul import Matmul

PASSWD = "/etc/passwd"
CUDA_HEAD = "// peak: entry=k grid=(1, 1, 1) block=(1, 1, 1) shared=0\n"
CUDA_BODY = 'extern "C" __global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {}\n'
HLSL_NAIVE = Matmul().naive_kernel("hlsl", "f32")
HAS_HLSL_COMPILER = hlsl.find_compiler() is not None

# (name, the hostile lines, the text the refusal must name)
HOSTILE = [
    ("absolute", '#include "/etc/passwd"', '#include "/etc/passwd"'),
    ("absolute_angle", "#include </etc/passwd>", "#include </etc/passwd>"),
    ("relative", '#include "../../../../../../../../etc/passwd"', "../../etc/passwd"),
    ("macro_built", '#define P "/etc/passwd"\n#include P', "#include P"),
    ("has_include", '#if __has_include("/etc/passwd")\n#endif', "__has_include"),
    ("include_next", "#include_next <cuda_fp16.h>", "#include_next"),
    ("embed", 'const char d[] = {\n#embed "/etc/passwd"\n};', "#embed"),
    ("line_file", '#line 1 "/etc/passwd"', "#line"),
    ("line_marker", '# 1 "/etc/passwd"', "line markers"),
    ("pragma_alias", '#pragma include_alias("a.h", "/etc/passwd")\n#include "a.h"', "#pragma"),
    ("spliced", '#inc\\\nlude "/etc/passwd"', "/etc/passwd"),
    ("comment_hidden", '/* x */ # /* y */ include "/etc/passwd"', "/etc/passwd"),
    ("string_fooled", 'const char* s = "/*";\n#include "/etc/passwd"\n// */', "/etc/passwd"),
    ("digraph", '%:include "/etc/passwd"', "/etc/passwd"),
    ("self_cuda", '#include "kernel.cu"', "kernel.cu"),
]


def _cuda_source(hostile: str) -> str:
    return CUDA_HEAD + hostile + "\n" + CUDA_BODY


def _hlsl_source(hostile: str) -> str:
    head, _, rest = HLSL_NAIVE.partition("\n")
    return head + "\n" + hostile + "\n" + rest


def _assert_no_leak(text: str) -> None:
    assert "root:" not in text and "/bin/bash" not in text and "/usr/sbin/nologin" not in text, text


@pytest.fixture(scope="module")
def nvrtc() -> CudaExecutor:
    return CudaExecutor(None, arch="sm_90a")


def _cuda_compile(executor: CudaExecutor, source: str) -> str:
    spec = launch_spec(source, "cuda", Matmul.symbols)
    with pytest.raises(CompileFailed) as failed:
        executor.compile(source, spec)
    return failed.value.log


@pytest.mark.parametrize(("name", "hostile", "named"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_cuda_refuses_before_compiling(nvrtc: CudaExecutor, name: str, hostile: str, named: str) -> None:
    log = _cuda_compile(nvrtc, _cuda_source(hostile))
    _assert_no_leak(log)
    assert log.startswith("kernel.cu:"), log  # our refusal with its line number, not an NVRTC diagnostic
    assert named in log and "was not compiled" in log


def test_cuda_toolkit_headers_are_still_allowed(nvrtc: CudaExecutor) -> None:
    source = CUDA_HEAD + "#include <cuda_fp16.h>\n#include \"mma.h\"\n#include <cuda_bf16.h>\n" + CUDA_BODY
    spec = launch_spec(source, "cuda", Matmul.symbols)
    assert nvrtc.compile(source, spec).resources["arch"] == "sm_90a"


def test_symlinks_out_of_the_include_tree_are_refused(tmp_path: Path) -> None:
    toolkit = tmp_path / "include"
    (toolkit / "sub").mkdir(parents=True)
    (toolkit / "real.h").write_text("#pragma once\n")
    (toolkit / "evil.h").symlink_to(PASSWD)
    (toolkit / "etc").symlink_to("/etc")
    (toolkit / "sub" / "inner.h").write_text("")
    allowed = [str(toolkit)]
    assert check_source('#include <real.h>\n#include "sub/inner.h"', allowed) == []
    for target in ("evil.h", "etc/passwd", "sub/../evil.h", "sub/../../include/real.h", "/etc/passwd"):
        refused = check_source(f"#include <{target}>", allowed)
        assert refused and target in refused[0].what, target


def test_quoted_include_shadowed_by_the_working_directory_is_refused(tmp_path: Path, monkeypatch) -> None:
    toolkit = tmp_path / "include"
    toolkit.mkdir()
    (toolkit / "real.h").write_text("")
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    (elsewhere / "real.h").symlink_to(PASSWD)
    monkeypatch.chdir(elsewhere)
    assert check_source('#include "real.h"', [str(toolkit)])  # the compiler would read ./real.h first
    assert check_source("#include <real.h>", [str(toolkit)]) == []


def test_sanitize_drops_diagnostics_about_other_files() -> None:
    leaked = ("/etc/passwd(1): error: this declaration has no storage class or type specifier\n"
              "  root:x:0:0:root:/root:/bin/bash\n  ^\n\n"
              "kernel.cu(4): error: identifier \"undeclared_name\" is undefined\n  C[r] = undeclared_name;\n")
    cleaned = sanitize_log(leaked, "kernel.cu", ["/opt/cuda/include"])
    _assert_no_leak(cleaned)
    assert "undeclared_name" in cleaned and "withheld" in cleaned
    glslang = "ERROR: /etc/passwd:1: 'root' : undeclared identifier\nERROR: kernel.hlsl:3: 'x' : bad"
    cleaned = sanitize_log(glslang, "kernel.hlsl")
    assert "root" not in cleaned and "kernel.hlsl:3" in cleaned


@pytest.mark.skipif(not HAS_HLSL_COMPILER, reason="no HLSL compiler")
@pytest.mark.parametrize(("name", "hostile", "named"), [*HOSTILE[:10], ("self_hlsl", '#include "kernel.hlsl"',
                                                                         "kernel.hlsl")], ids=lambda v: str(v)[:20])
def test_hlsl_refuses_every_include(name: str, hostile: str, named: str) -> None:
    executor = hlsl.HlslExecutor(None, compile_timeout_s=20)
    source = _hlsl_source(hostile)
    spec = launch_spec(source, "hlsl", Matmul.symbols)
    started = time.monotonic()
    with pytest.raises(CompileFailed) as failed:
        executor.compile(source, spec)
    assert time.monotonic() - started < 5  # refused up front: glslang never sees a self-include (it hangs)
    _assert_no_leak(failed.value.log)
    assert failed.value.log.startswith("kernel.hlsl:") and named in failed.value.log, failed.value.log
    if hostile.startswith("#include"):
        assert "HLSL kernels are one file; includes are not allowed" in failed.value.log


@pytest.mark.skipif(not HAS_HLSL_COMPILER, reason="no HLSL compiler")
def test_hlsl_compiler_timeout_says_the_compiler_timed_out(tmp_path: Path) -> None:
    slow = tmp_path / "slow-compiler"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    executor = hlsl.HlslExecutor(None, compile_timeout_s=0.5)
    executor.compiler = hlsl.Compiler("glslangValidator", str(slow))
    spec = launch_spec(HLSL_NAIVE, "hlsl", Matmul.symbols)
    with pytest.raises(CompileFailed) as failed:
        executor.compile(HLSL_NAIVE, spec)
    assert "compiler" in failed.value.log and "timed out" in failed.value.log and "never ran" in failed.value.log


@pytest.mark.skipif(not HAS_HLSL_COMPILER, reason="no HLSL compiler")
def test_hlsl_zero_numthreads_is_refused_at_compile() -> None:
    source = HLSL_NAIVE.replace("[numthreads(16, 16, 1)]", "[numthreads(0, 1, 1)]")
    assert source != HLSL_NAIVE, "the naive kernel's numthreads changed; update this test"
    executor = hlsl.HlslExecutor(None)
    spec = launch_spec(source, "hlsl", Matmul.symbols)
    with pytest.raises(CompileFailed) as failed:
        executor.compile(source, spec)
    assert "[numthreads(0, 1, 1)] has a zero dimension" in failed.value.log, failed.value.log


# --- through a real MCP client -----------------------------------------------------------------------------

pytest_anyio = pytest.mark.anyio
SMALL = {"M": 16, "N": 16, "K": 16}


@pytest_anyio
@pytest.mark.parametrize("backend", ["cuda", "hlsl"])
async def test_mcp_reply_names_the_include_and_leaks_nothing(make_client, backend: str) -> None:
    if backend == "hlsl" and not HAS_HLSL_COMPILER:
        pytest.skip("no HLSL compiler")
    async with make_client() as (client, _):
        started = await client.call_tool("start_session", {"backend": backend, "sizes": SMALL})
        assert not started.is_error, started.content[0].text
        sid = started.structured_content["session_id"]
        wrap = _cuda_source if backend == "cuda" else _hlsl_source
        own = f'#include "kernel.{"cu" if backend == "cuda" else "hlsl"}"'
        for hostile, named in (('#include "/etc/passwd"', '#include "/etc/passwd"'),
                               ('#define P "/etc/passwd"\n#include P', "#include P"),
                               ('#if __has_include("/etc/passwd")\n#endif', "__has_include"),
                               ('#include "../../../../../../etc/passwd"', "../etc/passwd"), (own, own)):
            result = await client.call_tool("submit_kernel", {"session_id": sid, "source": wrap(hostile)})
            assert not result.is_error, result.content[0].text
            text = result.content[0].text + str(result.structured_content)
            _assert_no_leak(text)
            report = result.structured_content
            assert report["status"] == "compile_error", report
            assert named in report["message"] and "kernel." in report["message"], report["message"]
        history = await client.call_tool("history", {"session_id": sid})
        _assert_no_leak(history.content[0].text)


def test_symlinked_cwd_header_is_not_in_compile_reach(nvrtc: CudaExecutor, tmp_path: Path, monkeypatch) -> None:
    """End to end on NVRTC: a quoted name that exists in the cwd as a symlink to /etc/passwd is refused."""
    (tmp_path / "cuda_fp16.h").symlink_to(PASSWD)
    monkeypatch.chdir(tmp_path)
    log = _cuda_compile(nvrtc, _cuda_source('#include "cuda_fp16.h"'))
    _assert_no_leak(log)
    assert '#include "cuda_fp16.h"' in log
    assert os.getcwd() == str(tmp_path)


def test_a_diagnostic_inside_a_toolkit_header_names_it_by_label(nvrtc: CudaExecutor) -> None:
    source = _cuda_source("#define __half2 int\n#include <cuda_fp16.h>")
    log = _cuda_compile(nvrtc, source)
    assert "<cuda>/cuda_fp16.h(" in log, log
    assert not any(d in log for d in nvrtc.include_dirs) and "site-packages" not in log, log
