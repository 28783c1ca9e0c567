"""What a worker does for one job. Pure functions over an Executor; the worker loop handles the transport."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from peak_mcp.backends import confined
from peak_mcp.backends.base import Compiled, CompileFailed, Executor
from peak_mcp.core.errors import PeakError
from peak_mcp.core.launch import LaunchSpec, with_params
from peak_mcp.evaluation import torch_paths
from peak_mcp.evaluation.generality import PASSED, UNJUDGED, size_note
from peak_mcp.evaluation.kernel_reference import KernelReferenced, ReferenceKernelFailed
from peak_mcp.evaluation.phases import Baseline, CompileInfo, Generality, SanitizerReport, SizeFailure
from peak_mcp.evaluation.steps import benchmark, fresh_seed, validate
from peak_mcp.problems.base import PROBLEM_CODE, BufferArg, Problem
from peak_mcp.problems.shipped import worker_problem
from peak_mcp.runner import problem_link
from peak_mcp.runner.heartbeat import heartbeat
from peak_mcp.runner.messages import EvaluateJob, GeneralityJob, LaunchTarget, TuneJob
from peak_mcp.runner.replies import EvaluateResult, GeneralityResult

if TYPE_CHECKING:
    from peak_mcp.runner import sanitizer as cuda_sanitizer
    from peak_mcp.runner import vulkan_sanitizer as vk_sanitizer

Progress = Callable[[str], None]


def _compile(executor: Executor, source: str, spec: LaunchSpec,
             progress: Progress) -> tuple[Compiled | None, CompileInfo]:
    started = time.perf_counter()
    try:
        with heartbeat(progress, "compile", limit_s=confined.limits().pulse_s):  # bounded by its limits
            kernel = executor.compile(with_params(source, spec.config()), spec)
    except CompileFailed as failed:
        return None, CompileInfo(ok=False, log=failed.log, reason=failed.reason or None,
                                 seconds=time.perf_counter() - started)
    return kernel, CompileInfo(ok=True, log=kernel.log, resources=kernel.resources,
                               seconds=time.perf_counter() - started)


def job_problem(executor: Executor, job: EvaluateJob | GeneralityJob | TuneJob, progress: Progress) -> Problem:
    """The problem a job names; checked against the session's reference kernel where the job carries one."""
    problem = worker_problem(job.problem, job.declaration)
    problem_link.attach(problem)  # an untrusted file's code: through its problem host
    if job.reference_kernel is None:
        return problem
    if job.declaration is None:
        raise PeakError(f"malformed job: a reference kernel for {job.problem}, which is no problem file")

    def compile_reference(source: str, spec: LaunchSpec) -> Compiled:
        kernel, info = _compile(executor, source, spec, lambda message: progress(f"reference kernel: {message}"))
        if kernel is None:
            raise ReferenceKernelFailed(f"the reference kernel (v{job.reference_kernel.version}) does not compile "
                                        f"here: {(info.reason or info.log or '')[:400]}")
        return kernel

    referenced = KernelReferenced(job.declaration, executor, job.reference_kernel, compile_reference)
    problem_link.attach(referenced)
    return referenced


def _seed(job: EvaluateJob | GeneralityJob) -> int:
    return job.seed if job.seed is not None else time.time_ns() % 2**31


def evaluate(executor: Executor, job: EvaluateJob | dict[str, Any], progress: Progress) -> EvaluateResult:
    """Compile, then (as asked in job.steps) validate, benchmark and time the vendor baseline.

    A version faster than job.vendor_ms (the vendor library's median) is validated once more on fresh inputs
    before its time is believed."""
    job = EvaluateJob.model_validate(job)
    steps = set(job.steps)
    problem = job_problem(executor, job, progress)
    dtype, sizes = job.dtype, job.sizes
    result = EvaluateResult(device=executor.facts)
    if job.source is not None:
        if job.spec is None:
            raise PeakError("an evaluate job with a source needs its spec")
        kernel, result.compile = _compile(executor, job.source, job.spec, progress)
        if kernel is None or not steps & {"validate", "benchmark"}:
            return result
        seed = _seed(job)
        started = time.perf_counter()
        validated = validate(executor, kernel, problem, dtype, sizes, trials=job.trials, seed=seed,
                             progress=progress)
        result.validation = validated.verdict
        result.validation.seconds = time.perf_counter() - started
        try:
            if validated.verdict.passed and "benchmark" in steps:
                started = time.perf_counter()
                timing = benchmark(
                    executor, kernel, problem, dtype, sizes, validated,
                    time_budget_s=job.time_budget_s, min_reps=job.min_reps, max_reps=job.max_reps,
                    progress=progress)
                # wall_s is the timed loop alone; seconds adds warm-up and the output re-check
                timing.device_name, timing.seconds = executor.facts.name, time.perf_counter() - started
                result.timing = timing
        finally:
            validated.close()
        timing = result.timing
        if (job.vendor_ms and timing and timing.recheck and timing.recheck.passed
                and timing.median_ms < job.vendor_ms):
            progress("faster than the vendor library: validating again on fresh inputs")
            # fresh: not the session's sets (those are kept between submissions), drawn anew each time: what it is
            # for is a kernel that learned the kept sets. Where the problem has stress ranges a second trial draws
            # fresh from them (the kept stress set is the only stress set the session's validation draws: a
            # kernel that recognised it passed with one trial). The reference's spot check is left out: a fact of
            # the problem at these sizes, checked above (about 5 s of a KernelBench LayerNorm's file, H200). Fresh sets
            # drawn ahead while the device was idle (prepare_job.py) are taken where there are any: used once each.
            again = validate(executor, kernel, problem, dtype, sizes, trials=2 if problem.stress_ranges() else 1,
                             seed=fresh_seed(), progress=progress, sets=1, keep=False, spot_check=False,
                             spare=True, owner=seed)
            again.close()
            result.revalidation = again.verdict
    if "baseline" in steps:
        result.baseline = yardstick(executor, problem, dtype, sizes, job.seed or 0, job.time_budget_s, progress)
    return result


def yardstick(executor: Executor, problem: Problem, dtype: str, sizes: dict[str, int], seed: int, budget_s: float,
              progress: Progress) -> Baseline:
    """The problem's vendor library timed on the same inputs (Problem.yardstick: matmul's "gemm" is cuBLAS,
    hipBLAS, or numpy's BLAS on a CPU Vulkan device), or why there is none; then the yardsticks every problem has
    (`common_yardsticks`: copy bandwidth for the roofline, torch eager and torch.compile)."""
    inputs = None
    if problem.yardstick is None:
        # what stands in for it is said by the server, which knows the device's profile (verdicts.no_vendor_reason)
        baseline = Baseline(available=False, reason=f"{problem.name} names no vendor library")
    else:
        progress("vendor baseline")
        inputs = problem.make_inputs(sizes, dtype, seed, executor.xp)
        baseline = Baseline.model_validate(executor.baseline(problem.yardstick, dtype, sizes, inputs, budget_s))
    extra = common_yardsticks(executor, problem, dtype, sizes, seed, budget_s, progress, inputs)
    return baseline.model_copy(update=extra)


TORCH_BUDGET_S = 2.0  # the most each torch yardstick's timed calls take (torch.compile's compilation comes on top)


def common_yardsticks(executor: Executor, problem: Problem, dtype: str, sizes: dict[str, int], seed: int,
                      budget_s: float, progress: Progress, inputs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Baseline fields every problem can have, on a CUDA device: the copy bandwidth (measured once per worker) and,
    for a problem with a torch_reference, torch eager and torch.compile timed on the workspace's inputs. Elsewhere,
    or without torch, `torch_note` says once why those are absent."""
    if executor.backend != "cuda" or executor.facts.index < 0:
        return {"torch_note": f"torch yardsticks are timed on CUDA devices only (this session: {executor.backend})"}
    from peak_mcp.evaluation import yardsticks

    out: dict[str, Any] = {}
    progress("yardsticks: copy bandwidth")
    try:
        out["copy_gbps"] = round(yardsticks.copy_bandwidth(executor.facts.index), 1)
    except Exception as exc:  # the roofline falls back to the device profile's bandwidth
        out["torch_note"] = f"copy bandwidth not measured: {type(exc).__name__}: {str(exc)[:200]}"
    remote = getattr(getattr(problem, "code", None), "torch_timings", None)  # a problem host's file
    fn = problem.torch_reference() if hasattr(problem, "torch_reference") else None
    if fn is None and (remote is None or not getattr(problem.declaration, "has_torch_reference", False)):
        out["torch_note"] = f"{problem.name} has no torch_reference: no torch yardsticks"
        return out
    if inputs is None:
        inputs = problem.make_inputs(sizes, dtype, seed, executor.xp)
    shaped = [inputs[arg.name].reshape(arg.shape(sizes)) for arg in problem.arguments(dtype)
              if isinstance(arg, BufferArg) and not arg.is_output]
    keywords = problem.torch_keywords(sizes) if hasattr(problem, "torch_keywords") else {}
    paths = torch_paths.paths_for(problem.traits)
    if fn is None:
        progress(f"yardsticks: torch eager and torch.compile {PROBLEM_CODE} {problem.source}")
        timings = remote(shaped, keywords, dtype, budget_s, paths)
    else:
        timings = torch_timings(lambda *tensors: fn(*tensors, **keywords), shaped, dtype, budget_s, progress,
                                paths)
    for key, value in timings.items():
        out.setdefault(key, value)  # a note already written (copy bandwidth) stays first
    return out


def torch_timings(call: Callable[..., Any], shaped: list[Any], dtype: str, budget_s: float,
                  progress: Progress, paths: tuple[str, ...] = (torch_paths.DEFAULT,)) -> dict[str, Any]:
    """torch eager on each of `paths` (torch_paths: its default, and the backends it chooses among pinned one by one)
    and torch.compile of `call`, each within TORCH_BUDGET_S: the fastest eager median with its path's name, every
    path's median or why it is missing, the compile median and its compilation's seconds, or a note on why one is
    missing. In a worker for shipped problems, in a problem host for the others."""
    from peak_mcp.evaluation import yardsticks

    out: dict[str, Any] = {}
    budget = min(budget_s, TORCH_BUDGET_S)
    by_path: dict[str, float | str] = {}
    for path in paths:
        progress("yardsticks: torch eager" + ("" if path == torch_paths.DEFAULT else f" ({path})"))
        timed = yardsticks.time_torch(torch_paths.pinned(call, path), shaped, compile=False, budget_s=budget,
                                      dtype=dtype)
        by_path[path] = round(timed.median_ms, 5) if timed.available and timed.median_ms else \
            f"unavailable: {timed.why}"
    best = torch_paths.fastest(by_path)
    if best:
        out["torch_eager_ms"] = best[1]
        if len(paths) > 1:
            out["torch_eager_path"], out["torch_eager_paths"] = best[0], by_path
    else:
        out["torch_note"] = f"torch eager: {by_path.get(torch_paths.DEFAULT, by_path[paths[0]])}"
    progress("yardsticks: torch.compile")
    timed = yardsticks.time_torch(call, shaped, compile=True, budget_s=budget, dtype=dtype)
    if timed.available and timed.median_ms:
        out["torch_compile_ms"] = round(timed.median_ms, 5)
        if timed.compile_s is not None:
            out["torch_compile_s"] = round(timed.compile_s, 1)
    elif "torch_note" not in out:
        out["torch_note"] = f"{timed.library}: {timed.why}"
    return out


def generality(executor: Executor, job: GeneralityJob | dict[str, Any], progress: Progress) -> GeneralityResult:
    """Validate one compiled kernel at each of job.sizes_list: one trial and the race check per size."""
    job = GeneralityJob.model_validate(job)
    problem = job_problem(executor, job, progress)
    kernel, compiled = _compile(executor, job.source, job.spec, progress)
    if kernel is None:
        return GeneralityResult(compile=compiled)
    seed = _seed(job)
    # Asked for, on a GPU, the sanitizer runs beside the sizes (its own processes, one small launch; nothing here is
    # timed), so the verdict waits for the longer of the two, not their sum. A CPU device (lavapipe) has no cores
    # to spare.
    beside = job.sanitize_beside and executor.facts.properties.get("device_type") != "cpu"
    checking = _start_sanitizer(executor, job, kernel) if beside else None
    try:
        result = _sizes(executor, kernel, problem, job, seed, progress)
        if not beside:
            checking = _start_sanitizer(executor, job, kernel)
        if checking is not None:
            result.sanitizer = checking if isinstance(checking, SanitizerReport) else checking.finish(progress)
    finally:
        if checking is not None and not isinstance(checking, SanitizerReport):
            checking.abort()  # a fault at one of the sizes ends the job: its sanitizer runs go with it
    return result


def _sizes(executor: Executor, kernel: Compiled, problem: Problem, job: GeneralityJob, seed: int,
           progress: Progress) -> GeneralityResult:
    """One trial at each of job.sizes_list, each size's verdict said as soon as it is known."""
    checked: list[dict[str, int]] = []
    failures: list[SizeFailure] = []
    unjudged: list[str] = []  # sizes where the reference kernel itself fails: nothing to judge a candidate by
    for sizes in job.sizes_list:
        label = _label(sizes)
        progress(f"generality at {label}")
        try:
            failure = _validate_at(executor, kernel, problem, job.dtype, sizes, seed,
                                   lambda message, label=label: progress(f"generality at {label}: {message}"))
        except ReferenceKernelFailed as exc:
            unjudged.append(str(exc))
            progress(size_note(label, UNJUDGED, str(exc)))
            continue
        checked.append(sizes)
        if failure:
            failures.append(failure)
        # Said now: a later size that hangs or crashes ends the job, and with it this result (see size_note).
        progress(size_note(label, failure.check or "failed", failure.message) if failure else size_note(label, PASSED))
    note = (f"not checked at {len(unjudged)} sampled sizes where the reference kernel fails: {unjudged[0]}"
            if unjudged else None)
    return GeneralityResult(generality=Generality(passed=not failures if checked or not unjudged else None,
                                                  sizes_checked=checked, failures=failures, note=note))


def _start_sanitizer(executor: Executor, job: GeneralityJob, kernel: Compiled
                     ) -> cuda_sanitizer.Running | vk_sanitizer.Running | SanitizerReport | None:
    """compute-sanitizer (CUDA, HIP on NVIDIA: on the module the worker compiled) or the Vulkan validation layer
    started on one launch at job.sanitize_sizes; None where the job asks for none."""
    if not (job.sanitize_sizes and executor.sanitizer and executor.facts.index >= 0):
        return None
    target = LaunchTarget(source=job.source, spec=job.spec, problem=job.problem, declaration=job.declaration,
                          dtype=job.dtype, sizes=job.sanitize_sizes, device=executor.facts.index,
                          backend=executor.backend)
    if executor.backend == "hlsl":
        from peak_mcp.runner import vulkan_sanitizer

        return vulkan_sanitizer.start(target)
    from peak_mcp.runner import sanitizer

    return sanitizer.start(target, module=kernel.binary, standby=job.sanitizer_standby)


def _validate_at(executor: Executor, kernel: Compiled, problem: Problem, dtype: str, sizes: dict[str, int],
                 seed: int, progress: Progress) -> SizeFailure | None:
    """One size's verdict. Progress comes once per launch, as in validation at the session's sizes: a slow kernel
    at a large sampled size (printf from every thread at M=4101 took over 30 s on the H100) is no hang."""
    try:
        validated = validate(executor, kernel, problem, dtype, sizes, trials=1, seed=seed, progress=progress,
                             sets=1)
    except ReferenceKernelFailed:
        raise
    except PeakError as exc:  # sizes the annotation cannot launch, or a device limit
        return SizeFailure(sizes=sizes, check=getattr(exc, "kind", "annotation"), message=str(exc))
    validated.close()
    if validated.verdict.passed:
        return None
    return SizeFailure(sizes=sizes, check=validated.verdict.check, message=validated.verdict.message)


def _label(sizes: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in sizes.items())
