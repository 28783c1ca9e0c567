"""HLSL to SPIR-V: find dxc or glslangValidator, run it on one kernel file, and turn its failures into messages.

The compiler runs in a private temporary directory on a file named `kernel.hlsl`, so its diagnostics read
`kernel.hlsl:LINE`. Whatever it prints goes through the include sandbox's `sanitize_log`, and any absolute path
left that the kernel's own text does not contain is redacted: a reply never shows where things live on the host.
A compiler that dies on a signal is reported as a compiler crash, with what is known to trigger it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from peak_mcp.backends.base import CompileFailed
from peak_mcp.backends.confined import run_compiler
from peak_mcp.backends.includes import sanitize_log

SOURCE_NAME = "kernel.hlsl"
OUTPUT_NAME = "kernel.spv"
REDACTED = "<host path>"


@dataclass(frozen=True)
class Compiler:
    name: str  # "dxc" | "glslangValidator"
    path: str
    # vulkan1.1 (SPIR-V 1.3) for the validation layer's GPU-assisted run: glslang decorates HLSL's structured
    # buffers BufferBlock, which SPIR-V 1.4+ (vulkan1.2) no longer allows, and the layer re-validates what it
    # instruments (drivers run the vulkan1.2 module as it is).
    target_env: str = "vulkan1.2"

    def command(self, entry: str, source: str, output: str) -> list[str]:
        # 16-bit types always on: `half` then means a real 16-bit float (HLSL 2018+ semantics), which f16
        # buffers need; f32 kernels are unaffected.
        if self.name == "dxc":
            return [self.path, "-spirv", "-T", "cs_6_2", "-E", entry, "-HV", "2021", "-enable-16bit-types",
                    f"-fspv-target-env={self.target_env}", "-Fo", output, source]
        return [self.path, "-D", "-V", "-S", "comp", "-e", entry, "--target-env", self.target_env,
                "--hlsl-enable-16bit-types", "-o", output, source]

    def version(self) -> str:
        try:
            done = subprocess.run([self.path, "--version"], capture_output=True, text=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"unknown ({type(exc).__name__})"
        lines = (done.stdout or done.stderr).strip().splitlines()
        return lines[0].strip() if lines else "unknown"


def find_compiler(prefer: str | None = None) -> Compiler | None:
    """dxc when on PATH (the reference HLSL compiler), else glslangValidator; `prefer` (the settings'
    hlsl_compiler, $PEAK_MCP_HLSL_COMPILER) forces one."""
    for name in [prefer] if prefer else ["dxc", "glslangValidator"]:
        path = shutil.which(name)
        if path:
            return Compiler("dxc" if Path(name).name.startswith("dxc") else "glslangValidator", path)
    return None


def compile_to_spirv(compiler: Compiler, source: str, entry: str, timeout_s: float) -> tuple[bytes, str]:
    """(SPIR-V, cleaned compiler log) for `source`; CompileFailed with a cleaned log when there is no module."""
    with tempfile.TemporaryDirectory(prefix="peak-hlsl-") as workdir:
        Path(workdir, SOURCE_NAME).write_text(source)
        done = run_compiler(compiler.name, compiler.command(entry, SOURCE_NAME, OUTPUT_NAME), workdir, SOURCE_NAME,
                            wall_seconds=timeout_s)
        log = clean_log(done.stdout + done.stderr, workdir, source, compiler)
        if done.returncode < 0:
            raise CompileFailed(crash_report(compiler, -done.returncode, source, log))
        output = Path(workdir, OUTPUT_NAME)
        if done.returncode != 0 or not output.exists():
            raise CompileFailed(log or f"{compiler.name} failed with exit status {done.returncode}")
        return output.read_bytes(), log


# An absolute POSIX path (not the right-hand side of a division: no word character or bracket just before it),
# or a Windows drive path.
_HOST_PATH = re.compile(r"(?<![\w.)\]'\"])/[\w.+\-@~]+(?:/[\w.+\-@~]*)*|\b[A-Za-z]:\\[^\s'\"]+")


def clean_log(text: str, workdir: str, source: str, compiler: Compiler) -> str:
    """Compiler output with temp paths removed (positions read `kernel.hlsl:LINE`), diagnostics about other files
    withheld, and any other absolute path that is not in the kernel's own text redacted."""
    for prefix in sorted({workdir, os.path.realpath(workdir)}, key=len, reverse=True):
        text = text.replace(prefix + os.sep, "").replace(prefix, "")
    text = text.replace(compiler.path, compiler.name)
    lines = [line.rstrip() for line in text.replace("\r", "").splitlines()]
    lines = [line for line in lines if line.strip() and line.strip() != SOURCE_NAME]  # glslang echoes the name
    text = sanitize_log("\n".join(lines), SOURCE_NAME)
    text = _HOST_PATH.sub(lambda m: m.group(0) if m.group(0) in source else REDACTED, text)
    if compiler.name != "glslangValidator":
        return text
    from peak_mcp.core.launch import own_source  # its positions follow `#line 1`: quote the kernel's own lines

    return quote_source_lines(text, own_source(source))


# glslang's positions: `ERROR: kernel.hlsl:16: 'x' : unknown variable` and `kernel.hlsl(16): error at column 31`.
_GLSLANG_POSITION = re.compile(re.escape(SOURCE_NAME) + r"(?::(?P<colon>\d+):|\((?P<paren>\d+)\):)"
                               r"(?:.*\bcolumn (?P<column>\d+))?")


def quote_source_lines(log: str, source: str) -> str:
    """glslang's log with the kernel's line quoted under each diagnostic, as clang and EDG print it (a caret under
    the column where glslang gives one); one quote for a run of diagnostics about the same line."""
    source_lines = source.splitlines()
    out: list[str] = []
    quoted: int | None = None
    for line in log.splitlines():
        out.append(line)
        match = _GLSLANG_POSITION.search(line)
        if match is None:
            quoted = None
            continue
        number = int(match.group("colon") or match.group("paren"))
        column = match.group("column")
        if not 1 <= number <= len(source_lines) or (number == quoted and column is None):
            continue
        text = source_lines[number - 1].expandtabs(4)
        if number != quoted:
            out.append(f"    {text}")
        if column is not None and 1 <= int(column) <= len(text) + 1:
            if number == quoted:
                out.append(f"    {text}")
            out.append("    " + " " * (int(column) - 1) + "^")
        quoted = number
    return "\n".join(out)


# A function parameter of a buffer type: `(ByteAddressBuffer buf` or `, RWStructuredBuffer<float> out`.
_BUFFER_PARAMETER = re.compile(
    r"[(,]\s*(?:(?:in|inout|out|const|globallycoherent)\s+)*(?P<type>(?:RW)?(?:ByteAddressBuffer|StructuredBuffer"
    r"\s*<[^<>()]*>))\s+\w+")


_KERNEL_POSITION = re.compile(re.escape(SOURCE_NAME) + r"(?::\d+|\(\d+\))")


def crash_report(compiler: Compiler, signum: int, source: str, log: str) -> str:
    """What to tell the agent when the compiler itself died on a signal (a compiler bug, not a kernel error)."""
    try:
        sig = signal.Signals(signum).name
    except ValueError:
        sig = f"signal {signum}"
    lines = [f"{SOURCE_NAME}: error: the HLSL compiler ({compiler.name}) crashed ({sig}) while compiling this "
             "kernel. This is a bug in the compiler that the source triggers, not an error in the kernel's code as "
             "such; the kernel never ran. Rewrite the construct that triggers it."]
    match = _BUFFER_PARAMETER.search(source)
    if match and compiler.name == "glslangValidator":
        line = source.count("\n", 0, match.start("type")) + 1
        lines.append(f"{SOURCE_NAME}:{line}: note: glslang is known to crash on functions that take a buffer "
                     f"(`{match.group('type')}`) as a parameter: use the global buffer inside the function and pass "
                     "the index instead, or inline the load/store at the call site")
    elif compiler.name == "glslangValidator":
        lines.append("hint: glslang is known to crash on functions taking a ByteAddressBuffer or StructuredBuffer "
                     "parameter (pass the index instead, or inline the load); otherwise bisect the last change")
    else:
        lines.append("hint: bisect the last change to find the construct the compiler cannot handle")
    # What the compiler said before it died, limited to the kernel's own diagnostics (no crash dump).
    said = [line for line in log.splitlines() if _KERNEL_POSITION.search(line)]
    if said:
        lines += ["the compiler's last diagnostics before it crashed:", *said]
    return "\n".join(lines)
