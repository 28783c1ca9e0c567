"""The Khronos validation layer's GPU-assisted validation over one launch of an HLSL kernel at a small size: Vulkan's
counterpart of compute-sanitizer's memcheck.

The validator's guards see a read past a buffer only through the value read; a kernel that reads past the end of A
and masks the value afterwards (`a = A[i]; if (!inside) a = 0;`) passes them. GPU-AV instruments the shader so
that every storage-buffer access is checked against its descriptor's range and reports the first out-of-bounds
one. The launch runs in a child process (`target` below) under VK_LAYER_KHRONOS_validation with GPU-assisted
validation on, each buffer its own exact allocation bound with its whole size. The shader is compiled for
vulkan1.1 (SPIR-V 1.3) there: the layer re-validates the module it instruments, and glslang's vulkan1.2 output
for structured buffers (BufferBlock in SPIR-V 1.5) fails that check, leaving the shader uninstrumented.

Where the layer is not installed, or cannot instrument the shader, the report says so and fails nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from peak_mcp.backends.toolkit import LAYER, kill_tree, layer_manifest, validation_layer_missing
from peak_mcp.confine.isolated import python_command, safe_cwd
from peak_mcp.evaluation.phases import SanitizerFinding, SanitizerReport, UncheckedTool
from peak_mcp.runner.messages import LaunchTarget
from peak_mcp.runner.target_inputs import load_inputs, with_inputs

TOOL = "vulkan_oob"  # the check is sanitizer_vulkan_oob
TIMEOUT_S = 180.0
LAUNCHED = "peak-vulkan-sanitizer: launched"
# GPU-AV's out-of-bounds messages: "Descriptor index 0 access out of bounds. Descriptor size is 1596 and highest
# byte accessed was 1599 ..." (1.3.2xx; VUID-vkCmdDispatch-None-02706) and newer layers' wording.
_OOB = re.compile(r"out of bounds|OOB|VUID-vkCmdDispatch-None-0(2706|8612|8613)", re.I)
_NO_INSTRUMENT = re.compile(r"Failure to instrument shader|Error during shader instrumentation|"
                            r"GPU-Assisted Validation disabled|GPU-AV.*disabled", re.I)
_HANDLE = re.compile(r"0x[0-9a-f]{6,}")


# GPU-assisted validation alone: the core checks, handle wrapping, thread safety and lifetimes off (their messages
# are not this check's), descriptor-indexing checks off (no descriptor arrays here); buffer bounds checks stay on.
# What a run costs is lavapipe compiling the instrumented shader: with Mesa's shader cache off, 0.4-0.5 s for
# naive.hlsl and tiled_groupshared.hlsl at 100x77x53, about 12 s for register_blocked.hlsl (0.75 s without the
# layer), with or without these settings.
SETTINGS = """khronos_validation.enables = VK_VALIDATION_FEATURE_ENABLE_GPU_ASSISTED_EXT
khronos_validation.disables = VK_VALIDATION_FEATURE_DISABLE_CORE_CHECKS_EXT,\
VK_VALIDATION_FEATURE_DISABLE_THREAD_SAFETY_EXT,VK_VALIDATION_FEATURE_DISABLE_OBJECT_LIFETIMES_EXT,\
VK_VALIDATION_FEATURE_DISABLE_UNIQUE_HANDLES_EXT
khronos_validation.gpuav_descriptor_indexing = false
khronos_validation.gpuav_buffer_oob = true
khronos_validation.report_flags = error
khronos_validation.debug_action = VK_DBG_LAYER_ACTION_LOG_MSG
khronos_validation.log_filename = stdout
"""


def layer_environment(settings_file: str | None = None) -> dict[str, str]:
    """The layer on, with GPU-assisted validation: vk_layer_settings.txt (`settings_file`, read by 1.3.2xx layers)
    and the environment variables of newer ones (validate_gpu_based)."""
    found = {"VK_LAYER_SETTINGS_PATH": settings_file} if settings_file else {}
    return {**found, "VK_INSTANCE_LAYERS": LAYER, "VK_LOADER_LAYERS_ENABLE": "*validation",
            "VK_LAYER_ENABLES": "VK_VALIDATION_FEATURE_ENABLE_GPU_ASSISTED_EXT",
            "VK_KHRONOS_VALIDATION_VALIDATE_GPU_BASED": "GPU_BASED_GPU_ASSISTED",
            "VK_KHRONOS_VALIDATION_GPUAV_BUFFER_OOB": "true",
            "VK_KHRONOS_VALIDATION_REPORT_FLAGS": "error", "VK_KHRONOS_VALIDATION_DEBUG_ACTION":
                "VK_DBG_LAYER_ACTION_LOG_MSG", "VK_KHRONOS_VALIDATION_LOG_FILENAME": "stdout"}


def run(job: LaunchTarget, progress: Callable[[str], None] | None = None) -> SanitizerReport:
    """One launch under GPU-assisted validation; never raises."""
    started = start(job)
    return started if isinstance(started, SanitizerReport) else started.finish(progress)


def start(job: LaunchTarget) -> Running | SanitizerReport:
    """One launch under GPU-assisted validation, started, to be finished later (the worker checks generality's
    sizes meanwhile); the report at once where the layer is missing. The child stays in the worker's process group
    (a worker killed as hung takes it along)."""
    if layer_manifest() is None:
        return SanitizerReport(available=False, **validation_layer_missing())
    return Running(job)


class Running:
    """The validation layer's run of one launch: finish() waits for it, abort() ends it."""

    def __init__(self, job: LaunchTarget) -> None:
        self.job = job
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = time.perf_counter()
        self.workdir = tempfile.mkdtemp(prefix="peak-vk-sanitize-", dir=safe_cwd())
        try:
            job_file = Path(self.workdir, "job.json")
            job_file.write_text(with_inputs(job, self.workdir).model_dump_json())
            self.log_file = Path(self.workdir, "layer.log")
            settings_file = Path(self.workdir, "vk_layer_settings.txt")
            settings_file.write_text(SETTINGS)
            with self.log_file.open("wb") as log:
                self.proc = subprocess.Popen(
                    python_command(sys.executable, "peak_mcp.runner.vulkan_sanitizer", str(job_file)),
                    cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
                    env={**os.environ, **layer_environment(str(settings_file))})
        except BaseException:
            self.abort()
            raise

    def finish(self, progress: Callable[[str], None] | None = None) -> SanitizerReport:
        """Wait for the run (a heartbeat every two seconds keeps the hang detector off); never raises."""
        proc, job = self.proc, self.job
        assert proc is not None
        where = " ".join(f"{k}={v}" for k, v in job.sizes.items())
        beat, timed_out = 0.0, False
        try:
            while proc.poll() is None:
                if time.perf_counter() - self.started > TIMEOUT_S:
                    kill_tree(proc.pid)
                    timed_out = True
                    break
                if progress and time.perf_counter() - beat > 2.0:
                    beat = time.perf_counter()
                    progress(f"Vulkan GPU-assisted validation at {where}")
                time.sleep(0.05)
            text = self.log_file.read_text(errors="replace") if self.log_file.exists() else ""
        finally:
            self.abort()
        buffers = _buffer_bytes(job)
        report = parse(text, proc.returncode, timed_out, buffers)
        if report.failures:
            report.failures[0].message += select_note(job.source, suspects(text, buffers))
        return report.model_copy(update={"sizes": job.sizes, "seconds": round(time.perf_counter() - self.started, 3)})

    def abort(self) -> None:
        """End the run if it still runs and remove the working folder (idempotent)."""
        if self.proc is not None and self.proc.poll() is None:
            kill_tree(self.proc.pid)
        shutil.rmtree(self.workdir, ignore_errors=True)


def suspects(text: str, buffers: dict[int, list[str]]) -> list[str]:
    """The buffers an out-of-bounds message can be about: those of the descriptor size it gives, else every one (a
    `?:` reading another buffer is not the fault's: an agent was sent to line 18's read of A for a fault in B)."""
    size = re.search(r"Descriptor size is (\d+)", text)
    named = buffers.get(int(size.group(1))) if size else None
    return named or [n for names in buffers.values() for n in names]


def select_note(source: str, buffers: list[str]) -> str:
    """Where an HLSL kernel reads a buffer inside a `?:` (`v = i < n ? x[i] : 0`), what a read past the buffer owes to
    it: HLSL's `?:` evaluates both sides (glslang emits an OpSelect), so the guard does not stop the read. Every
    HLSL author meets it; the layer's message does not say it. Empty where no `?:` reads a buffer."""
    if not buffers:
        return ""
    read = re.compile(r"\b(" + "|".join(map(re.escape, buffers)) + r")\s*(\[|\.Load)")
    for number, line in enumerate(source.splitlines(), 1):
        code = line.split("//")[0]
        question = code.find("?")
        colon = code.find(":", question + 1) if question >= 0 else -1
        hit = read.search(code, question) if colon > question >= 0 else None
        if hit:
            return (f". Line {number} reads {hit.group(1)} inside a `?:` ({' '.join(code.split())[:120]}): HLSL's "
                    "`?:` evaluates both sides (glslang emits a select), so the condition does not stop that read; "
                    "guard it with an if, or clamp the index (min(i, n - 1)) and select the value afterwards")
    return ""


def _buffer_bytes(job: LaunchTarget) -> dict[int, list[str]]:
    """{bytes: buffer names} of the launch's buffers, to name the one a message's descriptor size belongs to."""
    from peak_mcp.core.dtypes import itemsize
    from peak_mcp.problems.base import BufferArg
    from peak_mcp.problems.shipped import worker_problem

    named: dict[int, list[str]] = {}
    for arg in worker_problem(job.problem, job.declaration).arguments(job.dtype):
        if isinstance(arg, BufferArg):
            nbytes = max(4, (arg.count(job.sizes) * itemsize(arg.dtype) + 3) // 4 * 4)
            named.setdefault(nbytes, []).append(arg.name)
    return named


def parse(text: str, returncode: int | None, timed_out: bool = False,
          buffers: dict[int, list[str]] | None = None) -> SanitizerReport:
    """The report for one child's output: an out-of-bounds message fails it; a shader the layer could not
    instrument, or a launch that did not happen, leaves it unchecked."""
    messages = _messages(text)
    oob = [m for m in messages if _OOB.search(m)]
    if oob:
        size = re.search(r"Descriptor size is (\d+)", oob[0])
        which = (buffers or {}).get(int(size.group(1))) if size else None
        what = _which(which, int(size.group(1))) if size and which else ""
        finding = SanitizerFinding(check=f"sanitizer_{TOOL}",
                                   message=f"Vulkan GPU-assisted validation: {what}{_clean(oob[0])}"
                                           + (f" (and {len(oob) - 1} more)" if len(oob) > 1 else ""))
        return SanitizerReport(available=True, passed=False, failures=[finding])
    why = None
    if timed_out:
        why = f"the instrumented launch did not finish within {TIMEOUT_S:.0f} s"
    elif any(_NO_INSTRUMENT.search(m) for m in messages):
        why = "the layer could not instrument this shader: " + _clean(next(m for m in messages
                                                                              if _NO_INSTRUMENT.search(m)))
    elif LAUNCHED not in text or returncode != 0:
        tail = [line for line in text.strip().splitlines() if line.strip() and LAUNCHED not in line][-1:]
        why = f"the instrumented launch did not run (exit {returncode}): {(tail or ['no output'])[0][:200]}"
    if why:
        return SanitizerReport(available=True, passed=None, unchecked=[UncheckedTool(tool=TOOL, message=why)])
    return SanitizerReport(available=True, passed=True, clean=[TOOL])


def _which(names: list[str], nbytes: int) -> str:
    """The buffer an out-of-bounds message's descriptor size names. This layer's message gives only that size (no
    binding), so buffers of one size cannot be told apart from it: said so, with a way to find out."""
    if len(names) == 1:
        return f"an access past the end of buffer {names[0]} ({nbytes} bytes): "
    return (f"an access past the end of a {nbytes}-byte buffer, one of {', '.join(names)}: they are the same size "
            "at these sizes and the layer's message names only the size, not the binding, so it cannot tell them "
            f"apart. To find out, guard every index into one of them and submit again (the finding stays if it "
            f"is another). The layer says: ")


def _messages(text: str) -> list[str]:
    """The layer's messages, one string each (a message starts with its VUID or UNASSIGNED-... and a colon)."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if re.match(r"^(VUID|UNASSIGNED|SYNC|BestPractices|Validation)[-\w]*\(|^Validation Error", line):
            blocks.append([line])
        elif blocks and line.startswith(" "):
            blocks[-1].append(line.strip())
    return [" ".join(b) for b in blocks]


def _clean(message: str) -> str:
    """The layer's own words about the access, without handles, object lists or the spec's paragraph."""
    body = message.split(" | ", 2)[-1] if " | " in message else message
    body = body.split("The Vulkan spec states")[0].split("Objects:")[0]
    body = re.sub(r"(Command buffer|Pipeline|Shader Module) \(0x[0-9a-f]+\)\.?\s*", "", body)
    body = re.sub(r"(Unable to find SPIR-V OpLine for source information\.\s*)?Build shader with debug info to get "
                  r"source information\.\s*", "", body)
    return _HANDLE.sub("0x…", " ".join(body.split()))[:400]


def target(job_file: str) -> int:
    """Inside the layer: compile for vulkan1.1, allocate each buffer exactly, load the inputs, launch once."""
    import dataclasses

    import numpy as np

    from peak_mcp.backends.hlsl import HlslExecutor
    from peak_mcp.core.dtypes import itemsize
    from peak_mcp.core.launch import with_params
    from peak_mcp.problems.base import BufferArg, ScalarArg
    from peak_mcp.problems.shipped import worker_problem

    job = LaunchTarget.model_validate_json(Path(job_file).read_text())
    problem, dtype, sizes = worker_problem(job.problem, job.declaration), job.dtype, job.sizes
    executor = HlslExecutor(job.device)
    try:
        spec = job.spec
        source = with_params(job.source, spec.config())
        if executor.compiler is not None:
            executor.compiler = dataclasses.replace(executor.compiler, target_env="vulkan1.1")
        kernel = executor.compile(source, spec)
        inputs = load_inputs(job)  # made by the worker: no problem code runs here
        args = problem.arguments(dtype)
        buffers = []
        for arg in (a for a in args if isinstance(a, BufferArg)):
            buf = executor.alloc(arg.count(sizes) * itemsize(arg.dtype))
            if not arg.is_output:
                executor.write(buf, inputs[arg.name].view(np.uint8))
            buffers.append(buf)
        scalars = [a.value(sizes) for a in args if isinstance(a, ScalarArg)]
        executor.run(kernel, [executor.pointer(b, 0) for b in buffers], scalars, spec.evaluate(sizes))
        print(LAUNCHED, flush=True)
    finally:
        executor.close()  # GPU-AV reports what the launch's instrumentation recorded by the time the queue idles
    return 0


def main() -> int:
    return target(sys.argv[1])


if __name__ == "__main__":
    sys.exit(main())
