"""HIP backend: one kernel language, three ways to build it.

- NVIDIA GPU, or compile-only for an `sm_` target: HIP on CUDA, as HIP's own NVIDIA platform does it. The
  project's device header (hip_include/hip/hip_runtime.h) maps HIP's kernel API onto CUDA; NVRTC compiles and the
  CUDA executor runs and times (HipOnCudaExecutor is that executor with a HIP front). AMD-only code is refused
  with its lines before NVRTC sees it (hip_portability).
- AMD GPU: hiprtc and the HIP runtime through hip-python (hip_amd.py). Not verified on AMD hardware.
- No GPU: an AMD compiler for a named gfx target (amd_offline.py): errors, registers, LDS, occupancy; no run.

Which one a session gets (the probe and the worker decide alike, from the same machine state):
an AMD GPU where hip-python sees one, else an NVIDIA GPU, else compile-only for $PEAK_HIP_ARCH. That variable
names a gfx target (the offline AMD compiler) or an sm_ target (NVRTC); unset, it is gfx90a (MI200, PEAK's
device) where an AMD compiler is installed and the CUDA backend's compile target otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peak_mcp.backends import amd_offline
from peak_mcp.backends.base import Compiled, CompileFailed, Executor
from peak_mcp.backends.cuda import DEFAULT_ARCH as CUDA_DEFAULT_ARCH
from peak_mcp.backends.cuda import CudaExecutor
from peak_mcp.backends.hip_portability import (
    HIP_INCLUDE_DIR,
    amd_only_constructs,
    amd_only_log,
    include_refusal_log,
)
from peak_mcp.core.devices import cuda_family
from peak_mcp.core.launch import LaunchSpec

DEVICE_HEADER = str(Path(HIP_INCLUDE_DIR) / "hip" / "hip_runtime.h")
DEFAULT_AMD_ARCH = "gfx90a"
HIP_PYTHON_FIX = "pip install hip-python (the release matching your ROCm, e.g. 'hip-python~=6.2.0')"


@dataclass(frozen=True)
class Target:
    """Where a compile-only HIP session's kernels are built for: platform 'amd' (gfx...) or 'nvidia' (sm_...)."""

    platform: str
    arch: str

    @property
    def device_name(self) -> str:
        where = "no AMD GPU" if self.platform == "amd" else "HIP on NVIDIA, no GPU"
        return f"compile-only {self.arch} ({where})"


def compile_target(asked: str | None = None, clang: str | None = None) -> Target:
    """`asked`: the settings' hip_arch ($PEAK_HIP_ARCH); else gfx90a where an AMD compiler is installed."""
    if asked:
        return Target("nvidia" if asked.startswith("sm_") else "amd", asked)
    if amd_offline.find_toolchain(clang) is not None:
        return Target("amd", DEFAULT_AMD_ARCH)
    return Target("nvidia", CUDA_DEFAULT_ARCH)


class HipOnCudaExecutor(CudaExecutor):
    """HIP source on an NVIDIA GPU (or NVRTC compile-only): the CUDA executor with HIP's headers in front."""

    backend = "hip"
    extended_launches = False  # HIP has no TMA or clusters on AMD: a portable source must not rely on them
    source_name = "kernel.hip"
    pre_include = DEVICE_HEADER  # HIP compilers provide the runtime header without an #include; so does this

    def __init__(self, index: int | None, arch: str | None = None, flush: bool = True) -> None:
        super().__init__(index, arch=arch, flush=flush)
        self.include_dirs = [HIP_INCLUDE_DIR, *self.include_dirs]  # NVRTC: HIP's names, then the CUDA headers
        self.facts.backend = "hip"
        self.facts.properties["platform"] = "nvidia"
        if index is None:
            self.facts.name = Target("nvidia", self.arch).device_name

    def sandbox_dirs(self) -> list[str]:
        return [HIP_INCLUDE_DIR]  # a HIP kernel includes HIP headers only, as it would on AMD

    def build(self, source: str, spec: LaunchSpec) -> Compiled:
        refused = include_refusal_log(source)  # in HIP's words; the CUDA executor checks the same dirs again
        if refused:
            raise CompileFailed(refused)
        amd_only = amd_only_constructs(source)
        if amd_only:
            raise CompileFailed(amd_only_log(amd_only, self.source_name, self.arch))
        return super().build(source, spec)


def open_executor(index: int | None, *, hip_arch: str | None = None, hip_clang: str | None = None,
                  **options: Any) -> Executor:
    """`index` counts the devices of the platform the probe reports (AMD first); None opens the compile target."""
    if index is not None:
        if _amd_device_count() > 0:
            from peak_mcp.backends.hip_amd import HipAmdExecutor

            return HipAmdExecutor(index, **options)
        return HipOnCudaExecutor(index, **options)
    target = compile_target(hip_arch, hip_clang)
    if target.platform == "amd":
        return amd_offline.AmdOfflineExecutor(options.get("arch") or target.arch, amd_offline.find_toolchain(hip_clang))
    return HipOnCudaExecutor(None, arch=options.get("arch") or target.arch)


def _amd_device_count() -> int:
    try:
        from peak_mcp.backends.hip_amd import device_count
    except ImportError:
        return 0
    return device_count()


def probe(hip_arch: str | None = None, hip_clang: str | None = None) -> dict[str, Any]:
    """Devices of the platform that runs HIP here, the three compilers, and what a compile-only session targets."""
    report: dict[str, Any] = {"backend": "hip", "devices": [], "missing": []}
    compilers: dict[str, Any] = {}

    from peak_mcp.backends import cuda, hip_amd

    amd = hip_amd.probe()
    compilers["amd_runtime"] = amd["compiler"]
    report["missing"] += amd["missing"]
    nvidia = cuda.probe()
    compilers["nvidia"] = {**nvidia["compiler"], "header": DEVICE_HEADER}
    report["missing"] += [m for m in nvidia["missing"] if m["what"] in ("NVRTC", "cupy")]
    if amd["devices"]:
        report["devices"] = amd["devices"]
    elif nvidia["devices"]:
        report["devices"] = [{**d, "backend": "hip", "properties": {**d.get("properties", {}), "platform": "nvidia"}}
                             for d in nvidia["devices"]]
        report["missing"] = [m for m in report["missing"] if m["what"] != "hip-python"]  # NVIDIA runs without it
    chain = amd_offline.find_toolchain(hip_clang)
    compilers["amd_offline"] = {"available": chain is not None, **(
        {"name": chain.version, "clang": chain.clang, "rocm_path": chain.rocm_path,
         "targets": {arch: amd_offline.target_problem(chain, arch) is None for arch in ("gfx90a", "gfx942")}}
        if chain else {})}
    if chain is None:
        report["missing"].append({"what": "AMD offline compiler", "why": "no clang with HIP headers and ROCm device "
                                  "libraries was found: kernels cannot be compiled for gfx targets (MI200/MI300)",
                                  "fix": amd_offline.INSTALL_HINT})
    target = compile_target(hip_arch, hip_clang)
    compilers["compile_only_target"] = f"{target.arch} ({target.platform})"
    ready, why = _target_ready(target, compilers, hip_clang)
    if not ready:
        report["missing"].append({"what": f"HIP compiler for {target.arch}", "why": why,
                                  "fix": "set PEAK_HIP_ARCH to a target listed under compiler (gfx90a, or sm_90a "
                                         f"for NVRTC), or {amd_offline.INSTALL_HINT}"})
    if not report["devices"]:
        report["missing"].append({"what": "HIP GPU", "why": "no AMD GPU (through hip-python) and no NVIDIA GPU",
                                  "fix": f"kernels still compile here for {target.arch} (compile-only); to run them "
                                         f"use a machine with an AMD GPU and {HIP_PYTHON_FIX}, or an NVIDIA GPU"})
    if amd["devices"]:
        compilers["available"] = bool(amd["compiler"].get("available"))
    elif report["devices"]:
        compilers["available"] = bool(compilers["nvidia"].get("available"))
    else:
        compilers["available"] = ready
    compilers["name"] = ", ".join(n for n, ok in (("NVRTC + HIP device header", compilers["nvidia"].get("available")),
                                                  (f"{chain.version if chain else ''} (gfx, offline)", chain),
                                                  ("hiprtc", amd["compiler"].get("available"))) if ok)
    report["compiler"] = compilers
    if ready:  # what a session without a GPU is described as (loop/devices.py, Devices.device_for)
        props: dict[str, Any] = {"arch": target.arch, "platform": target.platform}
        if target.platform == "nvidia":
            props["family"] = cuda_family(target.arch)
        report["compile_target"] = {"backend": "hip", "index": -1, "name": target.device_name, "properties": props}
    return report


def _target_ready(target: Target, compilers: dict[str, Any], clang: str | None) -> tuple[bool, str]:
    if target.platform == "nvidia":
        return bool(compilers["nvidia"].get("available")), "NVRTC is not available"
    chain = amd_offline.find_toolchain(clang)
    if chain is None:
        return False, "no AMD HIP compiler is installed"
    problem = amd_offline.target_problem(chain, target.arch)
    return problem is None, f"{chain.version} cannot compile for {target.arch}: {problem}"
