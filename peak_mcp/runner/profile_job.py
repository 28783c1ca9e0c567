"""The worker's `profile` job: compile a version, then read what the tools at hand can tell about it.

CUDA, and HIP on NVIDIA: resources from the cubin and ptxas's log, occupancy from the device's limits (checked
against the driver's own answer where a GPU is present), the SASS mix from nvdisasm (or cuobjdump), and Nsight
Compute counters of one launch where ncu and a GPU are present. HIP on AMD: what the compile reports (registers,
LDS, scratch, spills, the compiler's waves per SIMD); no mix or counters, and says why. HLSL: SPIR-V reflection and
instruction mix, and the Vulkan device's limits. Every mix is static (each instruction of the code once), and says
so. Every tool runs with a timeout in the worker's private directory; only parsed numbers leave this module.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from peak_mcp.backends.base import Compiled, Executor
from peak_mcp.backends.toolkit import find_tool, kill_tree
from peak_mcp.confine.isolated import python_command, safe_cwd
from peak_mcp.evaluation.profiling.cubin import cubin_resources, ptxas_resources
from peak_mcp.evaluation.profiling.ncu import NCU_METRICS, ncu_raw_csv
from peak_mcp.evaluation.profiling.occupancy import cuda_limits, occupancy
from peak_mcp.evaluation.profiling.report import (
    Counters,
    InstructionMix,
    Occupancy,
    ProfileReport,
    Resources,
    unavailable,
)
from peak_mcp.evaluation.profiling.sass import sass_mix
from peak_mcp.evaluation.profiling.spirv_mix import spirv_mix
from peak_mcp.runner.jobs import Progress, _compile
from peak_mcp.runner.messages import LaunchTarget, ProfileJob
from peak_mcp.runner.replies import ProfileResult
from peak_mcp.runner.target_inputs import with_inputs

DISASSEMBLE_TIMEOUT_S = 60.0
NCU_TIMEOUT_S = 240.0
_WHERE = "PATH, $CUDA_HOME/bin, /usr/local/cuda/bin or the nvidia-cuda-* wheels"
# Metrics every ncu since 2022 knows on sm_70+: the fallback when the full list is refused.
_NCU_CORE = ("gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
             "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
             "sm__warps_active.avg.pct_of_peak_sustained_active")


def profile(executor: Executor, job: ProfileJob | dict[str, Any], progress: Progress) -> ProfileResult:
    """The kernel's profile at job.sizes (the session's), Nsight Compute counters where asked and possible; only
    the compile record when the source does not compile."""
    job = ProfileJob.model_validate(job)
    kernel, compiled = _compile(executor, job.source, job.spec, progress)
    if kernel is None:
        return ProfileResult(compile=compiled)
    sizes = job.sizes
    geometry = kernel.spec.evaluate(sizes)
    platform = executor.facts.properties.get("platform")
    if executor.backend == "cuda" or (executor.backend == "hip" and platform == "nvidia"):
        report = _cuda(executor, kernel, job, sizes, geometry, progress)  # HIP on NVIDIA builds through NVRTC too
    elif executor.backend == "hip" and platform == "amd":
        report = _amd(executor, kernel, geometry)
    elif executor.backend == "hlsl":
        report = _hlsl(executor, kernel)
    else:
        why = f"profiling is not implemented for the {executor.backend} backend"
        report = ProfileReport(backend=executor.backend, entry=kernel.spec.entry, device=executor.facts.name,
                               resources=unavailable(Resources, why), occupancy=unavailable(Occupancy, why),
                               instruction_mix=unavailable(InstructionMix, why), counters=unavailable(Counters, why))
    return ProfileResult(profile=report)


# --- CUDA -------------------------------------------------------------------------------------------------------


def _cuda(executor: Executor, kernel: Compiled, job: ProfileJob, sizes: dict[str, int], geometry: dict[str, Any],
          progress: Progress) -> ProfileReport:
    entry, arch = kernel.spec.entry, str(kernel.resources.get("arch", ""))
    block = tuple(geometry["block"])
    resources = _cuda_resources(kernel, entry, block, int(geometry["shared"]))
    device = getattr(executor, "device", None)
    return ProfileReport(backend=executor.backend, entry=entry, device=executor.facts.name, arch=arch,
                         resources=resources,
                         occupancy=_cuda_occupancy(executor, kernel, resources, arch, device),
                         instruction_mix=_sass(kernel, entry, progress),
                         counters=_counters(executor, job, sizes, entry, progress))


def _cuda_resources(kernel: Compiled, entry: str, block: tuple[int, ...], dynamic: int) -> Resources:
    ptxas = ptxas_resources(kernel.log, entry)
    elf: dict[str, int] = {}
    note = None
    if kernel.binary:
        try:
            elf = cubin_resources(kernel.binary, entry)
        except (ValueError, IndexError, struct.error) as exc:
            note = f"the cubin could not be read ({exc}): numbers from ptxas's log"
    registers = elf.get("registers", ptxas.get("registers", kernel.resources.get("registers")))
    if registers is None:
        return unavailable(Resources, "neither the cubin nor ptxas's log gave this kernel's resources",
                           block=block, dynamic_shared_bytes=dynamic)
    return Resources(
        registers=registers,
        static_shared_bytes=ptxas.get("static_shared_bytes", kernel.resources.get("static_shared_bytes")),
        dynamic_shared_bytes=dynamic,
        local_bytes=elf.get("local_bytes", ptxas.get("local_bytes", kernel.resources.get("local_bytes"))),
        spill_store_bytes=ptxas.get("spill_store_bytes"), spill_load_bytes=ptxas.get("spill_load_bytes"),
        max_threads_per_block=elf.get("max_threads_per_block", elf.get("required_threads")), block=block,
        source="cubin (.nv.info) and ptxas -v" if elf else "ptxas -v", note=note)


def _cuda_occupancy(executor: Executor, kernel: Compiled, resources: Resources, arch: str,
                    device: Any) -> Occupancy:
    if not resources.available or resources.block is None:
        return unavailable(Occupancy, "the kernel's registers are unknown")
    detected = {}
    if device is not None:
        props = device.properties
        detected = {name: getattr(props, name, None) for name in (
            "warp_size", "max_threads_per_multiprocessor", "max_blocks_per_multiprocessor", "max_threads_per_block",
            "max_registers_per_multiprocessor", "max_registers_per_block", "max_shared_memory_per_multiprocessor",
            "max_shared_memory_per_block_optin", "reserved_shared_memory_per_block")}
    limits = cuda_limits(arch, detected)
    if limits is None:
        return unavailable(Occupancy, f"no limits are known for {arch}: run on the GPU so that they are read from it")
    threads = resources.block[0] * resources.block[1] * resources.block[2]
    shared = (resources.static_shared_bytes or 0) + (resources.dynamic_shared_bytes or 0)
    result = occupancy(resources.registers or 0, threads, shared, limits)
    if kernel.handle is not None:
        try:
            # above 48 KiB of dynamic shared memory the kernel must opt in first, as a launch does
            configure = getattr(executor, "_config", None)
            if configure is not None and (resources.dynamic_shared_bytes or 0) > 48 * 1024:
                configure(kernel, {"grid": (1, 1, 1), "block": resources.block,
                                   "shared": resources.dynamic_shared_bytes})
            result.driver_blocks_per_sm = int(kernel.handle.occupancy.max_active_blocks_per_multiprocessor(
                threads, resources.dynamic_shared_bytes or 0))
        except Exception as exc:  # the estimate stands without the driver's word
            result.note = "; ".join(filter(None, [result.note, f"the driver's occupancy query failed: {exc}"]))
    return result


def _sass(kernel: Compiled, entry: str, progress: Progress) -> InstructionMix:
    tools = [(name, path) for name in ("nvdisasm", "cuobjdump") if (path := find_tool(name))]
    if not tools:
        return unavailable(InstructionMix, f"SASS mix: neither nvdisasm nor cuobjdump was found on {_WHERE}; "
                                           "pip install nvidia-cuda-nvdisasm (or the CUDA toolkit)")
    if not kernel.binary:
        return unavailable(InstructionMix, "SASS mix: the compiler returned no cubin")
    progress("disassembling")
    workdir = tempfile.mkdtemp(prefix="peak-profile-", dir=safe_cwd())
    try:
        cubin = Path(workdir, "kernel.cubin")
        cubin.write_bytes(kernel.binary)
        failures = []
        for name, path in tools:
            # Relative names (the tools run in workdir), so their messages cannot quote this machine's paths.
            command = [path, "-c", cubin.name] if name == "nvdisasm" else [path, "-sass", cubin.name]
            try:
                done = subprocess.run(command, cwd=workdir, capture_output=True, text=True,
                                      timeout=DISASSEMBLE_TIMEOUT_S, errors="replace")
            except subprocess.TimeoutExpired:
                failures.append(f"{name} did not finish within {DISASSEMBLE_TIMEOUT_S:.0f} s")
                continue
            if done.returncode == 0:
                return sass_mix(done.stdout, entry, source=name)
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            failures.append(f"{name} failed: {_scrub(last, workdir)[:200]}")
        return unavailable(InstructionMix, "SASS mix: " + "; ".join(failures))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _counters(executor: Executor, job: ProfileJob, sizes: dict[str, int], entry: str,
              progress: Progress) -> Counters:
    if not job.counters:
        return unavailable(Counters, "ncu: not asked for (counters=false)")
    if executor.facts.index < 0:
        return unavailable(Counters, "ncu: needs a GPU, and this session has none (it compiles only)")
    ncu = find_tool("ncu")
    if ncu is None:
        return unavailable(Counters, f"ncu: Nsight Compute was not found on {_WHERE} or /opt/nvidia/nsight-compute; "
                                     "install it (apt-get install cuda-nsight-compute-13-0) or put ncu on PATH")
    started = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix="peak-ncu-", dir=safe_cwd())
    try:
        job_file = Path(workdir, "job.json")
        target = LaunchTarget(source=job.source, spec=job.spec, problem=job.problem, declaration=job.declaration,
                              dtype=job.dtype, sizes=sizes, device=executor.facts.index,
                              backend="hip" if executor.backend == "hip" else "cuda")
        job_file.write_text(with_inputs(target, workdir).model_dump_json())
        failure = None
        for metrics in (tuple(NCU_METRICS), _NCU_CORE):
            failure = _ncu_run(ncu, metrics, entry, job_file, workdir, progress)
            if failure is None or "metric" not in failure.lower():
                break
        if failure is not None:
            return unavailable(Counters, f"ncu: {failure}", sizes=sizes)
        done = subprocess.run([ncu, "--import", "report.ncu-rep", "--csv", "--page", "raw",
                               "--print-units", "base"], cwd=workdir, capture_output=True, text=True,
                              timeout=DISASSEMBLE_TIMEOUT_S, errors="replace")
        metrics, units = ncu_raw_csv(done.stdout)
        if not metrics:
            return unavailable(Counters, f"ncu: the report had no metrics for '{entry}'", sizes=sizes)
        return Counters(sizes=sizes, metrics=metrics, units=units, seconds=round(time.perf_counter() - started, 3))
    except subprocess.TimeoutExpired:
        return unavailable(Counters, "ncu: reading the report timed out", sizes=sizes)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _ncu_run(ncu: str, metrics: tuple[str, ...], entry: str, job_file: Path, workdir: str,
             progress: Progress) -> str | None:
    """Profile one launch of `entry` (the sanitizer's one-launch target serves) into report.ncu-rep; why not, or
    None. The child stays in the worker's process group so that a worker killed as hung takes it along."""
    command = [ncu, "--kernel-name", entry, "--launch-count", "1", "--clock-control", "none",
               "--metrics", ",".join(metrics), "--export", "report", "--force-overwrite",
               *python_command(sys.executable, "peak_mcp.runner.sanitizer", job_file.name)]
    log = Path(workdir, "ncu.log")
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=workdir, stdout=out, stderr=subprocess.STDOUT)
        started = beat = time.perf_counter()
        while proc.poll() is None:
            if time.perf_counter() - started > NCU_TIMEOUT_S:
                kill_tree(proc.pid)
                return f"did not finish within {NCU_TIMEOUT_S:.0f} s"
            if time.perf_counter() - beat > 2.0:  # keeps the pool's hang detector quiet
                beat = time.perf_counter()
                progress("Nsight Compute: profiling one launch")
            time.sleep(0.05)
    text = log.read_text(errors="replace")
    if "ERR_NVGPUCTRPERM" in text:
        return ("needs permission to read the GPU's performance counters (ERR_NVGPUCTRPERM): run as root or load "
                "the driver with NVreg_RestrictProfilingToAdminUsers=0")
    if Path(workdir, "report.ncu-rep").is_file() and proc.returncode == 0:
        return None
    errors = [line.split("==ERROR==", 1)[1].strip() for line in text.splitlines() if "==ERROR==" in line]
    if "No kernels were profiled" in text:
        errors.append(f"no launch of '{entry}' was profiled")
    return _scrub("; ".join(errors), workdir)[:300] or f"exited with status {proc.returncode}"


def _scrub(text: str, workdir: str) -> str:
    """A tool's message without the paths of this machine's scratch directories."""
    for path in sorted({workdir, os.path.realpath(workdir), safe_cwd(), os.path.realpath(safe_cwd())}, key=len,
                       reverse=True):
        text = text.replace(path, ".")
    return text


# --- HIP on AMD -------------------------------------------------------------------------------------------------


def _amd(executor: Executor, kernel: Compiled, geometry: dict[str, Any]) -> ProfileReport:
    """What the AMD compile tells (the offline compiler's resource remarks, or hipFuncGetAttribute on a GPU), and
    for the rest, why not."""
    res = kernel.resources
    block = tuple(geometry["block"])
    threads = block[0] * block[1] * block[2]
    remarks = "vgprs" in res  # the offline compiler's remarks; a GPU's module answers hipFuncGetAttribute
    details = [f"{name} {res[key]}" for key, name in (("vgprs", "VGPRs"), ("agprs", "AGPRs"), ("sgprs", "SGPRs"),
                                                     ("vgpr_spills", "VGPR spills"), ("sgpr_spills", "SGPR spills"),
                                                     ("mfma_instructions", "MFMA instructions in the kernel"))
               if key in res]
    resources = Resources(
        registers=res.get("registers"), static_shared_bytes=res.get("static_shared_bytes"),
        dynamic_shared_bytes=int(geometry["shared"]), local_bytes=res.get("scratch_bytes", res.get("local_bytes")),
        max_threads_per_block=res.get("max_threads_per_block"), block=block,  # type: ignore[arg-type]
        source="the compiler's resource remarks (-Rpass-analysis=kernel-resource-usage)" if remarks
        else "hipFuncGetAttribute",
        note="; ".join(details) or None)
    waves = res.get("occupancy_waves_per_simd")
    wave = int(executor.facts.properties.get("warp_size") or 64)
    occupancy = Occupancy(block_threads=threads, warps_per_block=-(-threads // wave), waves_per_simd=waves,
                          note=f"the compiler's figure: {waves} waves per SIMD from registers and LDS (waves of "
                               f"{wave} threads)") if waves else unavailable(
        Occupancy, "no occupancy here: the HIP runtime's attributes give none, and no AMD occupancy calculator is "
                   "wired in (the offline compiler's remarks have it: a compile-only gfx session shows them)")
    mix = unavailable(InstructionMix, "no instruction mix for AMD: counting GCN/CDNA assembly is not implemented; "
                                      "the resources' note counts the MFMA instructions where the compile kept them")
    counters = unavailable(Counters, "no counters: Nsight Compute profiles NVIDIA GPUs only, and rocprof is not "
                                     "wired in" + ("; this session only compiles (no AMD GPU)"
                                                   if executor.facts.index < 0 else ""))
    return ProfileReport(backend=executor.backend, entry=kernel.spec.entry, device=executor.facts.name,
                         arch=str(res.get("arch") or executor.facts.properties.get("arch") or "") or None,
                         resources=resources, occupancy=occupancy, instruction_mix=mix, counters=counters)


# --- HLSL -------------------------------------------------------------------------------------------------------


def _hlsl(executor: Executor, kernel: Compiled) -> ProfileReport:
    res, props = kernel.resources, executor.facts.properties
    threads = int(res.get("threads_per_group", 0))
    resources = Resources(static_shared_bytes=res.get("groupshared_bytes"), block=tuple(res.get("numthreads") or ())
                          or None, source="SPIR-V reflection",
                          note="registers, local memory and spills are chosen by the Vulkan driver when it builds the "
                               "pipeline; SPIR-V does not carry them")
    spirv = getattr(kernel.handle, "spirv", None)
    try:
        mix = spirv_mix(spirv) if spirv else unavailable(InstructionMix, "no SPIR-V was kept for this kernel")
    except ValueError as exc:
        mix = unavailable(InstructionMix, f"SPIR-V mix: {exc}")
    limits: dict[str, Any] = {}
    if executor.facts.index >= 0:
        limits = {k: props[k] for k in ("max_shared_memory", "subgroup_size", "max_compute_workgroup_invocations")
                  if props.get(k) is not None}
        if limits.get("subgroup_size") and threads:
            limits["subgroups_per_workgroup"] = -(-threads // int(limits["subgroup_size"]))
    why = ("Vulkan defines no occupancy: how many workgroups share a compute unit depends on the registers the "
           "driver allocates when it builds the pipeline, which the API does not report")
    occ = unavailable(Occupancy, why, device_limits=limits,
                      note=None if limits else "no Vulkan device in this worker: device limits unread")
    counters = unavailable(Counters, "ncu: Nsight Compute profiles CUDA kernels; Vulkan dispatches get no counters")
    return ProfileReport(backend="hlsl", entry=kernel.spec.entry, device=executor.facts.name, resources=resources,
                         occupancy=occ, instruction_mix=mix, counters=counters)
