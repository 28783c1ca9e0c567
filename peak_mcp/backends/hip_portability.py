"""What a HIP kernel may contain, checked in its text before any compiler runs: the same on every platform.

Includes: HIP header names only (hip_include/ holds them; on NVIDIA they are the CUDA device header, on AMD the
compiler's own HIP headers are read under the same names), through the shared include sandbox.

HIP on NVIDIA (the CUDA device header + NVRTC) cannot run AMD-only code: matrix-core and other amdgcn builtins,
the AMD device library, GCN inline assembly, amdgpu attributes, or code that assumes 64-lane waves. NVRTC would
stop at the first of them with an unhelpful "identifier is undefined"; this scan names every one, with its line.

Code inside a preprocessor group whose condition names an AMD platform macro is the author's portable fallback
(`#if defined(__HIP_PLATFORM_AMD__) ... #else ... #endif`): it is left to the preprocessor, not refused.
"""

from __future__ import annotations

import re
from pathlib import Path

from peak_mcp.backends.includes import Refusal, _splice, _strip_comments, check_source, refusal_log

HIP_INCLUDE_DIR = str(Path(__file__).resolve().parent / "hip_include")
SOURCE_NAME = "kernel.hip"
_CUDA_ONLY_ADVICE = "only headers of the CUDA toolkit can be included (e.g. <cuda_fp16.h>, <mma.h>)"
# What hipify renames in kernels that use CUDA's 16-bit types (nothing else in such a kernel differs in HIP).
_HIP_NAMES = {"#include <cuda_fp16.h>": "#include <hip/hip_fp16.h>",
              "#include <cuda_bf16.h>": "#include <hip/hip_bf16.h>", "__nv_bfloat16": "__hip_bfloat16"}


def hip_spelling(cuda_source: str) -> str:
    """A CUDA kernel written as HIP: HIP's runtime header first, HIP's 16-bit headers and type names in place of
    CUDA's. Kernels that need more (WMMA's <mma.h>, cooperative groups) stay refused, as HIP would refuse them."""
    for cuda_name, hip_name in _HIP_NAMES.items():
        cuda_source = cuda_source.replace(cuda_name, hip_name)
    return f"#include <hip/hip_runtime.h>\n{cuda_source}"


def include_refusal_log(source: str) -> str | None:
    """Why the kernel's #include lines are refused (HIP's wording of the sandbox's verdict), or None."""
    refused = check_source(source, [HIP_INCLUDE_DIR])
    if not refused:
        return None
    allowed = "<hip/hip_runtime.h>, <hip/hip_fp16.h>, <hip/hip_bfloat16.h>, <hip/hip_bf16.h>"
    return refusal_log(refused, SOURCE_NAME).replace(
        _CUDA_ONLY_ADVICE, f"only HIP headers can be included ({allowed})").replace("only toolkit headers",
                                                                                     "only HIP headers")

# (pattern, why): searched in the comment-free text, outside AMD-guarded groups.
_AMD_ONLY = [
    (re.compile(r"\b__builtin_amdgcn_mfma\w*"), "an AMD matrix-core (MFMA) builtin"),
    (re.compile(r"\b__builtin_amdgcn_\w+"), "an AMD GCN builtin"),
    (re.compile(r"\b__(?:ockl|ocml|llvm_amdgcn)_\w+"), "a function of the AMD device library"),
    (re.compile(r"\b__AMDGCN_WAVEFRONT_SIZE\b"), "the AMD wavefront size (NVIDIA warps have 32 lanes)"),
    (re.compile(r"\bwarpSize\s*==\s*64\b|\b64\s*==\s*warpSize\b"), "an assumption of 64-lane waves "
                                                                   "(NVIDIA warps have 32 lanes)"),
    (re.compile(r"\bamdgpu_\w+"), "an amdgpu attribute"),
    (re.compile(r"\b(?:asm|__asm__|__asm)\b\s*(?:volatile\b|__volatile__\b)?\s*\(\s*\"\s*"
                r"(?:v_|s_|ds_|buffer_|global_|flat_|scratch_|exp\b)"), "GCN inline assembly"),
]
# A condition that names one of these makes its whole #if group platform-specific.
_AMD_MACRO = re.compile(r"__HIP_PLATFORM_(?:AMD|HCC)__|__AMDGCN\w*|__gfx\w+__|__HIP__\b")
_CONDITIONAL = re.compile(r"^\s*#\s*(?P<kind>if|ifdef|ifndef|elif|else|endif)\b(?P<rest>.*)$")


def amd_only_constructs(source: str) -> list[Refusal]:
    """Every AMD-only construct that NVIDIA compilation would meet, one refusal per line and kind."""
    found: dict[tuple[int, str], None] = {}
    guarded: list[bool] = []  # one entry per open #if group: does an enclosing condition name an AMD macro?
    for number, line in _strip_comments(_splice(source)):
        directive = _CONDITIONAL.match(line)
        if directive:
            kind, rest = directive.group("kind"), directive.group("rest")
            if kind in ("if", "ifdef", "ifndef"):
                guarded.append(bool(_AMD_MACRO.search(rest)))
            elif kind == "elif" and guarded:
                guarded[-1] = guarded[-1] or bool(_AMD_MACRO.search(rest))
            elif kind == "endif" and guarded:
                guarded.pop()
            continue
        if any(guarded):
            continue
        for pattern, why in _AMD_ONLY:
            match = pattern.search(line)
            if match:
                found[(number, f"`{match.group(0).strip()}` is {why}")] = None
                break  # the MFMA builtin is an amdgcn builtin too: one reason per line
    return [Refusal(line, what) for line, what in sorted(found)]


def amd_only_log(refusals: list[Refusal], file_name: str, arch: str) -> str:
    lines = [f"{r.render(file_name)}: AMD-only, cannot compile for NVIDIA ({arch})" for r in refusals]
    lines.append("the kernel was not compiled: this session runs HIP on NVIDIA through CUDA, where AMD matrix cores, "
                 "GCN builtins and 64-lane waves do not exist. Use portable HIP (warpSize, __shfl_xor, __half) or "
                 "put the AMD path under #if defined(__HIP_PLATFORM_AMD__) with a portable #else")
    return "\n".join(lines)

