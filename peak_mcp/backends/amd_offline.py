"""HIP compiled for a named AMD GPU without one: clang's HIP device compile for a gfx target, compile-only.

What a session learns here is what the compiler knows: errors with line numbers, and per kernel the registers
(VGPR, AGPR, SGPR), LDS, scratch and spills, and the occupancy (waves per SIMD) they allow, from clang's
resource-usage remarks. Nothing runs. The compile stops at GCN assembly (`-S`): inline assembly is then copied
as text, never assembled, so an `.incbin` in the agent's source cannot read a file into anything.

The toolchain is found, in order, from $PEAK_HIP_CLANG, ROCm ($ROCM_PATH, /opt/rocm) and Debian's packages
(`apt-get install hipcc`: clang-15, rocm-device-libs and the HIP 5.2 headers).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peak_mcp.backends.base import Compiled, CompileFailed, DeviceFacts, Executor
from peak_mcp.backends.confined import run_compiler
from peak_mcp.backends.hip_portability import SOURCE_NAME, include_refusal_log
from peak_mcp.backends.includes import sanitize_log, short_paths
from peak_mcp.core.launch import LaunchSpec

COMPILE_TIMEOUT_S = 120.0
MAX_LDS_BYTES = 65536  # per workgroup on CDNA
MAX_THREADS_PER_BLOCK = 1024
INSTALL_HINT = ("apt-get install hipcc (Debian 12: clang-15, rocm-device-libs, HIP headers; ~25 s) or install ROCm "
                "(/opt/rocm); or point $PEAK_HIP_CLANG at a clang++ that targets amdgcn")
_REMARK = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):\d+: remark:\s+(?P<key>[^:]+?):\s*(?P<value>\S+)\s*"
                     r"\[-Rpass-analysis=kernel-resource-usage\]$")
_DIAGNOSTIC = re.compile(r"^\S[^:\n]*:\d+:\d+: (?:error|warning|note|remark|fatal error):|^\d+ (?:error|warning)s? ")
_RESOURCE_KEYS = {"SGPRs": "sgprs", "VGPRs": "vgprs", "AGPRs": "agprs", "ScratchSize [bytes/lane]": "scratch_bytes",
                  "Occupancy [waves/SIMD]": "occupancy_waves_per_simd", "SGPRs Spill": "sgpr_spills",
                  "VGPRs Spill": "vgpr_spills", "LDS Size [bytes/block]": "lds_bytes"}


@dataclass(frozen=True)
class AmdToolchain:
    clang: str
    version: str
    rocm_path: str  # holds include/hip/hip_runtime.h
    device_libs: str  # holds ockl.bc

    def base_args(self, arch: str) -> list[str]:
        return [self.clang, "-x", "hip", f"--offload-arch={arch}", "--cuda-device-only",
                f"--rocm-path={self.rocm_path}", f"--rocm-device-lib-path={self.device_libs}"]

    def include_dirs(self) -> list[str]:
        """Where diagnostics about headers may point: the HIP headers and clang's own."""
        dirs = [str(Path(self.rocm_path) / "include" / "hip")]
        try:
            resource = subprocess.run([self.clang, "-print-resource-dir"], capture_output=True, text=True,
                                      timeout=10, check=False).stdout.strip()
            if resource:
                dirs.append(str(Path(resource) / "include"))
        except (OSError, subprocess.SubprocessError):
            pass
        return dirs


def _clang_candidates(clang: str | None = None) -> list[str]:
    named = [clang or ""]
    roots = [os.environ.get("ROCM_PATH", ""), "/opt/rocm"]
    named += [str(Path(r) / "llvm" / "bin" / "clang++") for r in roots if r]
    named += [shutil.which(f"clang++-{v}") or "" for v in range(22, 14, -1)] + [shutil.which("clang++") or ""]
    return [c for c in dict.fromkeys(named) if c and os.access(c, os.X_OK)]


def _rocm_layout(clang: str) -> tuple[str, str] | None:
    """(rocm_path, device_libs) that go with this clang: a ROCm tree next to it, else the system's."""
    roots = [os.environ.get("ROCM_PATH", ""), str(Path(clang).resolve().parent.parent.parent), "/opt/rocm", "/usr"]
    for root in (r for r in roots if r):
        if not (Path(root) / "include" / "hip" / "hip_runtime.h").is_file():
            continue
        libs = [Path(root) / "amdgcn" / "bitcode", Path(root) / "lib" / "amdgcn" / "bitcode",
                Path(root) / "lib" / "x86_64-linux-gnu" / "amdgcn" / "bitcode"]
        found = next((d for d in libs if (d / "ockl.bc").is_file()), None)
        if found:
            return root, str(found)
    return None


@functools.cache
def find_toolchain(named: str | None = None) -> AmdToolchain | None:
    """The first clang that accepts a HIP device compile for gfx90a with HIP headers and device libraries;
    `named` (the settings' hip_clang, $PEAK_HIP_CLANG) is tried first."""
    for clang in _clang_candidates(named):
        layout = _rocm_layout(clang)
        if layout is None:
            continue
        chain = AmdToolchain(clang, "", *layout)
        if target_problem(chain, "gfx90a") is None:
            try:
                first = subprocess.run([clang, "--version"], capture_output=True, text=True, timeout=10,
                                       check=False).stdout.splitlines()[:1]
            except (OSError, subprocess.SubprocessError):
                first = []
            return AmdToolchain(clang, first[0] if first else "clang", *layout)
    return None


@functools.cache
def target_problem(chain: AmdToolchain, arch: str) -> str | None:
    """Why this toolchain cannot compile for `arch` (the driver's own words), or None when it can. A dry run."""
    if not re.fullmatch(r"gfx[0-9a-f]{3,4}(?::[a-z]+[+-])*", arch):
        return f"{arch!r} is not a gfx target name (e.g. gfx90a, gfx942)"
    try:
        done = subprocess.run([*chain.base_args(arch), "-###", "-c", "-o", os.devnull, "-"], input="",
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{chain.clang} did not run: {exc}"
    if done.returncode == 0:
        return None
    errors = [line.removeprefix("clang: ").strip() for line in done.stderr.splitlines() if "error:" in line]
    return "; ".join(errors) or f"{chain.clang} exited with {done.returncode}"


def parse_remarks(log: str) -> dict[str, dict[str, int]]:
    """Per kernel, the resource-usage remarks: {'matmul': {'vgprs': 40, 'agprs': 64, ...}}."""
    kernels: dict[str, dict[str, int]] = {}
    current: dict[str, int] | None = None
    for line in log.splitlines():
        match = _REMARK.match(line.strip())
        if not match:
            continue
        key, value = match.group("key").strip(), match.group("value")
        if key == "Function Name":
            current = kernels.setdefault(value, {})
        elif current is not None and key in _RESOURCE_KEYS and value.isdigit():
            current[_RESOURCE_KEYS[key]] = int(value)
    return kernels


_STATE_SECTION = re.compile(r"^\s*(?:\.section\s+(?P<name>\S+?)(?:,(?P<flags>\S*))?"
                            r"|(?P<short>\.data|\.bss|\.text))\s*$")
_OBJECT = re.compile(r"^\s*\.type\s+(?P<name>[\w.$]+),@object")
_LABEL = re.compile(r"^(?P<name>[\w.$]+):")


def persistent_state(assembly: str, source: str) -> list[str]:
    """Writable device variables and device-heap use in the module (what cubin.persistent_state finds for CUDA).

    LLVM places `__constant__` variables among writable data too, so those declared `__constant__` in the source
    are let through by name."""
    constants = set(re.findall(r"__constant__[^;=]*?\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*(?:=|;)", source))
    found: set[str] = set()
    objects: set[str] = set()
    writable = False
    for line in assembly.splitlines():
        section = _STATE_SECTION.match(line)
        if section:
            name = section.group("name") or section.group("short") or ""
            writable = name in (".data", ".bss") or name.startswith((".data.", ".bss.")) or \
                "#write" in (section.group("flags") or "")
            continue
        obj = _OBJECT.match(line)
        if obj:
            objects.add(obj.group("name"))
            continue
        label = _LABEL.match(line)  # `.type` comes before the section switch: the label's section is the object's
        if label and label.group("name") in objects and writable and \
                not any(c in label.group("name") for c in constants):
            found.add(f"__device__ variable '{label.group('name')}'")
    if re.search(r"\b(?:__ockl_dm_alloc|__hip_malloc|malloc)\b", assembly):
        found.add("device heap (malloc)")
    return sorted(found)


def _without_remarks(log: str) -> str:
    """Compiler output less the resource remarks (reported as resources) and the source lines quoted under them."""
    kept: list[str] = []
    in_remark = False
    for line in log.splitlines():
        if _DIAGNOSTIC.match(line):
            in_remark = bool(_REMARK.match(line.strip()))
        if not in_remark:
            kept.append(line)
    return "\n".join(kept).strip()


_CRASH = re.compile(r"^(?:PLEASE submit a bug report|Stack dump:)", re.MULTILINE)


def _without_crash_dump(log: str) -> str:
    """clang's crash report names the host's compiler, ROCm and temp paths (its full command line, the reproducer
    files): the agent learns only that the compiler crashed on this source."""
    match = _CRASH.search(log)
    if not match:
        return log
    return (log[: match.start()].rstrip() + f"\n{SOURCE_NAME}: error: the compiler crashed on this source (a "
            "compiler bug the kernel triggers, or a `#pragma clang __debug`); its crash report was withheld").strip()


def _short_paths(log: str, header_dirs: list[str]) -> str:
    """Diagnostics about a HIP or clang header read `<hip>/hip_runtime.h`, not the host's install paths."""
    return short_paths(log, {d: "<hip>" if Path(d).name == "hip" else "<clang>" for d in header_dirs})


def _kernel_body(assembly: str, entry: str) -> str:
    start = assembly.find(f"\n{entry}:")
    end = assembly.find(".Lfunc_end", start) if start >= 0 else -1
    return assembly[start:end] if start >= 0 and end > start else ""


class AmdOfflineExecutor(Executor):
    """Compile-only: `compile` works, everything that would touch a device refuses."""

    backend = "hip"

    def __init__(self, arch: str, chain: AmdToolchain | None = None) -> None:
        chain = chain or find_toolchain()
        if chain is None:
            raise RuntimeError(f"no AMD HIP compiler was found: {INSTALL_HINT}")
        problem = target_problem(chain, arch)
        if problem:
            raise RuntimeError(f"{chain.version} cannot compile for {arch}: {problem}")
        self.arch, self.chain = arch, chain
        self.header_dirs = chain.include_dirs()
        self.facts = DeviceFacts("hip", -1, f"compile-only {arch} (no AMD GPU)",
                                 {"arch": arch, "platform": "amd", "compiler": chain.version, "warp_size": 64})

    def compile(self, source: str, spec: LaunchSpec) -> Compiled:
        refused = include_refusal_log(source)
        if refused:
            raise CompileFailed(refused)
        with tempfile.TemporaryDirectory(prefix="peak-hip-") as work:
            Path(work, SOURCE_NAME).write_text(source)
            args = [*self.chain.base_args(self.arch), "-S", "-O3", "-std=c++17", "-include", "hip/hip_runtime.h",
                    "-Rpass-analysis=kernel-resource-usage", "-fno-color-diagnostics", "-o", "kernel.s", SOURCE_NAME]
            done = run_compiler("clang", args, work, SOURCE_NAME, read=tuple(self.header_dirs),
                                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMPDIR": work, "LC_ALL": "C"},
                                wall_seconds=COMPILE_TIMEOUT_S)
            assembly = Path(work, "kernel.s").read_text(errors="replace") if done.returncode == 0 else ""
        diagnostics = _short_paths(sanitize_log(_without_crash_dump(_without_remarks(done.stderr)), SOURCE_NAME,
                                                self.header_dirs), self.header_dirs)
        if done.returncode != 0:
            raise CompileFailed(diagnostics or f"{self.chain.clang} exited with {done.returncode}")
        kept = persistent_state(assembly, source)
        if kept:
            raise CompileFailed(
                f"{SOURCE_NAME}: the module keeps state between launches: {', '.join(kept)}. A kernel must do all "
                "of its work on every launch from its arguments alone; use registers or __shared__ memory for "
                "scratch, __constant__ for tables, and no device malloc")
        kernels = parse_remarks(done.stderr)
        if spec.entry not in kernels:
            found = ", ".join(sorted(kernels)) or "none"
            raise CompileFailed(f"{SOURCE_NAME}: entry '{spec.entry}' named on the peak: line (line {spec.line}) is "
                                f"not a kernel of the compiled module (kernels: {found}); declare it extern \"C\" "
                                "__global__ with exactly that name")
        used = kernels[spec.entry]
        body = _kernel_body(assembly, spec.entry)
        resources: dict[str, Any] = {
            "arch": self.arch, "platform": "amd", **used,
            # gfx90a and newer allocate VGPRs and AGPRs from one file: their sum is what bounds occupancy.
            "registers": used.get("vgprs", 0) + used.get("agprs", 0),
            "static_shared_bytes": used.get("lds_bytes", 0),
            "mfma_instructions": len(re.findall(r"^\s*v_mfma_", body, re.MULTILINE)),
        }
        return Compiled(handle=None, spec=spec, resources=resources, log=diagnostics)

    def check_geometry(self, kernel: Compiled, geometry: dict[str, Any]) -> str | None:
        block, shared = geometry["block"], geometry["shared"]
        threads = block[0] * block[1] * block[2]
        if threads > MAX_THREADS_PER_BLOCK:
            return f"block={block} has {threads} threads, over the {MAX_THREADS_PER_BLOCK} an AMD workgroup allows"
        lds = kernel.resources.get("lds_bytes", 0) + shared
        if lds > MAX_LDS_BYTES:
            return f"LDS: {lds} B (static + dynamic) exceeds the {MAX_LDS_BYTES} B per workgroup on {self.arch}"
        return None

    def _no_device(self, *_: Any, **__: Any) -> Any:
        raise RuntimeError(f"this HIP executor is compile-only ({self.arch}, no AMD GPU)")

    alloc = free = write = read = pointer = run = time = _no_device  # type: ignore[assignment]
