"""The wall behind the include check: with the text check switched off, a compiler still reads nothing of the host,
and a macro bomb is stopped by the compile limits and reported as `resources`, never as a hung kernel."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from peak_mcp.backends import confined, cuda, hlsl
from peak_mcp.backends.base import CompileFailed
from peak_mcp.backends.registry import launch_spec
from peak_mcp.confine.sandbox import (
    SYSTEM_READ,
    Policy,
    confined_command,
    landlock_abi,
    python_runtime_paths,
    tool_paths,
    worker_policy,
)
from peak_mcp.problems.matmul import Matmul

LANDLOCK = landlock_abi().active
needs_landlock = pytest.mark.skipif(not LANDLOCK, reason=f"no Landlock here: {landlock_abi().reason}")
SECRET = "31337"
HAS_GLSLANG = hlsl.find_compiler("glslangValidator") is not None


def bomb(depth: int = 40) -> str:
    """1 KB of macros that expand to 2**depth tokens."""
    lines = ["#define A0 1+"] + [f"#define A{i} A{i - 1} A{i - 1}" for i in range(1, depth + 1)]
    return "\n".join(lines) + f"\nstatic const int bomb = A{depth} 0;\n"


def with_lines(source: str, lines: str) -> str:
    head, _, rest = source.partition("\n")  # after the peak: annotation
    return f"{head}\n{lines}\n{rest}"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "private" / "secret.h"
    path.parent.mkdir()
    path.write_text(f"{SECRET}\n")
    return path


@pytest.fixture
def tight_limits() -> Iterator[confined.CompileLimits]:
    before = confined.limits()
    yield confined.configure(memory_bytes=768 << 20, cpu_seconds=4, wall_seconds=20)
    confined.configure(**{k: getattr(before, k) for k in ("memory_bytes", "cpu_seconds", "wall_seconds", "sandbox")})


@needs_landlock
def test_a_confined_process_reads_and_writes_only_what_it_was_given(tmp_path: Path, secret: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    policy = Policy(read=(*SYSTEM_READ, *python_runtime_paths()), write=(str(workdir),))  # the interpreter too
    script = (f"import pathlib; print(pathlib.Path({str(secret)!r}).read_text())",
              f"open({str(workdir / 'ok.txt')!r}, 'w').write('x'); print('wrote')",
              f"open({str(tmp_path / 'outside.txt')!r}, 'w').write('x')",
              "print(open('/etc/passwd').read())",
              "print(open('/usr/lib/os-release').read()[:4] if __import__('os').path.exists('/usr/lib/os-release') "
              "else 'NAME')")
    results = [subprocess.run(confined_command(policy, [sys.executable, "-I", "-S", "-c", code]), cwd=workdir,
                              capture_output=True, text=True, timeout=30) for code in script]
    assert SECRET not in results[0].stdout and "Permission denied" in results[0].stderr
    assert results[1].stdout.strip() == "wrote"
    assert "Permission denied" in results[2].stderr and not (tmp_path / "outside.txt").exists()
    assert "root:" not in results[3].stdout and "Permission denied" in results[3].stderr
    assert results[4].returncode == 0 and results[4].stdout.strip()  # the system trees stay readable


def test_limits_apply_with_the_sandbox_off() -> None:
    policy = Policy(memory_bytes=256 << 20, cpu_seconds=7)
    done = subprocess.run(confined_command(policy, ["/bin/sh", "-c", "ulimit -v; ulimit -t"], enabled=False),
                          capture_output=True, text=True, timeout=30)
    assert done.stdout.split() == [str(256 << 10), "7"], done


def test_tool_paths_keep_a_home_directory_closed(tmp_path: Path) -> None:
    (tmp_path / "vk" / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "vk" / "usr" / "lib").mkdir()
    found = tool_paths({"PATH": f"{tmp_path}/vk/usr/bin:/root:/:relative/bin",
                        "LD_LIBRARY_PATH": f"{tmp_path}/vk/usr/lib"})
    assert found == [str((tmp_path / "vk" / "usr").resolve())]


# --- every compiler, with the include check switched off ------------------------------------------------------

@needs_landlock
def test_nvrtc_reads_nothing_when_the_text_check_is_bypassed(monkeypatch, secret: Path) -> None:
    monkeypatch.setattr(cuda, "check_source", lambda source, dirs: [])
    executor = cuda.CudaExecutor(None, arch="sm_90a")
    naive = Matmul().naive_kernel("cuda", "f32")
    source = with_lines(naive, f'static_assert(0 + \n#include "{secret}"\n == 0, "leak");')
    try:
        with pytest.raises(CompileFailed) as failed:
            executor.compile(source, launch_spec(source, "cuda", Matmul.symbols))
    finally:
        executor.close()
    assert SECRET not in failed.value.log
    assert "cannot open source file" in failed.value.log, failed.value.log


@needs_landlock
@pytest.mark.skipif(not HAS_GLSLANG, reason="no glslangValidator")
def test_glslang_reads_nothing_when_the_text_check_is_bypassed(monkeypatch, secret: Path) -> None:
    monkeypatch.setattr(hlsl, "check_source", lambda source, dirs: [])
    executor = hlsl.HlslExecutor(None, compiler="glslangValidator")
    naive = Matmul().naive_kernel("hlsl", "f32")
    source = with_lines(naive, f'static const int leak = 0 + \n#include "{secret}"\n;')
    with pytest.raises(CompileFailed) as failed:
        executor.compile(source, launch_spec(source, "hlsl", Matmul.symbols))
    assert SECRET not in failed.value.log, failed.value.log


# --- a macro bomb ---------------------------------------------------------------------------------------------

@pytest.mark.skipif(not HAS_GLSLANG, reason="no glslangValidator")
def test_glslang_macro_bomb_is_a_resources_error(tight_limits: confined.CompileLimits) -> None:
    executor = hlsl.HlslExecutor(None, compiler="glslangValidator")
    source = with_lines(Matmul().naive_kernel("hlsl", "f32"), bomb())
    started = time.monotonic()
    with pytest.raises(CompileFailed) as failed:
        executor.compile(source, launch_spec(source, "hlsl", Matmul.symbols))
    assert failed.value.reason == "resources", failed.value.log
    assert "compile_error: resources" in failed.value.log and "never ran" in failed.value.log
    assert time.monotonic() - started < tight_limits.wall_seconds + 5


def test_nvrtc_macro_bomb_is_a_resources_error(tight_limits: confined.CompileLimits) -> None:
    executor = cuda.CudaExecutor(None, arch="sm_90a")
    source = with_lines(Matmul().naive_kernel("cuda", "f32"), bomb())
    started = time.monotonic()
    try:
        with pytest.raises(CompileFailed) as failed:
            executor.compile(source, launch_spec(source, "cuda", Matmul.symbols))
        assert failed.value.reason == "resources", failed.value.log
        assert "NVRTC" in failed.value.log and "limit" in failed.value.log
        assert time.monotonic() - started < tight_limits.wall_seconds + 5
        naive = Matmul().naive_kernel("cuda", "f32")  # the pool replaces the child it lost
        assert executor.compile(naive, launch_spec(naive, "cuda", Matmul.symbols)).binary
    finally:
        executor.close()


# --- a confined worker --------------------------------------------------------------------------------------

@needs_landlock
def test_worker_policy_keeps_tools_on_path_runnable_and_home_closed(tmp_path: Path, secret: Path) -> None:
    """A compiler unpacked outside the system trees and put on PATH (as on the lent GPU machine) stays runnable."""
    tool = tmp_path / "unpacked" / "usr" / "bin" / "hello"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\necho hello\n")
    tool.chmod(0o755)
    workdir = tmp_path / "work"
    workdir.mkdir()
    env = {"PATH": f"{tool.parent}:/usr/bin:/bin"}
    code = ("import os, subprocess, sys; from peak_mcp.confine.sandbox import confine, worker_policy; "
            f"os.environ.update({env!r}); confine(worker_policy(os.getcwd())); "
            "print(subprocess.run(['hello'], capture_output=True, text=True).stdout.strip()); "
            f"print(open({str(secret)!r}).read())")
    done = subprocess.run([sys.executable, "-c", code], cwd=workdir, capture_output=True, text=True, timeout=60,
                          env={**env, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert done.stdout.splitlines()[:1] == ["hello"], done
    assert SECRET not in done.stdout and "Permission denied" in done.stderr
    assert str(workdir.resolve()) in worker_policy(str(workdir.resolve())).write


@needs_landlock
def test_clang_for_amd_targets_reads_nothing_when_the_text_check_is_bypassed(monkeypatch, secret: Path) -> None:
    from peak_mcp.backends import amd_offline

    chain = amd_offline.find_toolchain()
    if chain is None:
        pytest.skip("no AMD offline compiler (apt-get install hipcc)")
    monkeypatch.setattr(amd_offline, "include_refusal_log", lambda source: None)
    executor = amd_offline.AmdOfflineExecutor("gfx90a", chain)
    naive = Matmul().naive_kernel("hip", "f32")
    source = with_lines(naive, f'static_assert(0 + \n#include "{secret}"\n == 0, "leak");')
    with pytest.raises(CompileFailed) as failed:
        executor.compile(source, launch_spec(source, "hip", Matmul.symbols))
    assert SECRET not in failed.value.log, failed.value.log


def test_nvrtcs_own_out_of_memory_code_reads_as_a_memory_limit() -> None:
    limits = confined.CompileLimits()
    assert confined.exceeded_limit(1, "NVRTC_ERROR_OUT_OF_MEMORY", limits) == "memory (4 GiB)"


@needs_landlock
def test_a_confined_process_knows_a_user_name_without_reading_etc_passwd(tmp_path: Path) -> None:
    # torch asks getpass.getuser() for its caches; with no user in the environment that falls back to
    # /etc/passwd, which a confined process cannot read (KeyError: 'getpwuid(): uid not found').
    policy = Policy(read=(*SYSTEM_READ, *python_runtime_paths()), write=(str(tmp_path),))
    env = {k: v for k, v in os.environ.items() if k not in ("LOGNAME", "USER", "LNAME", "USERNAME")}
    done = subprocess.run(confined_command(policy, [sys.executable, "-I", "-S", "-c",
                                                    "import getpass; print(getpass.getuser())"]),
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"uid{os.getuid()}"
