"""The jobs the service sends a worker, as typed records shared by both ends.

The service builds them; the pool carries them as JSON lines; the worker validates each one on arrival
(`JOB.validate_python`), so a malformed job is refused with its field named instead of failing deep in a run.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from peak_mcp.core.launch import LaunchSpec
from peak_mcp.evaluation.kernel_reference import ReferenceKernel
from peak_mcp.problems.declaration import ProblemDeclaration

Sizes = dict[str, int]


class _Job(BaseModel):
    model_config = ConfigDict(extra="forbid")

    problem: str
    # A problem file's declaration (its path and sha256 with it): the worker imports that file, and only if it still
    # holds those bytes. None for a built-in class (matmul), found by name.
    declaration: ProblemDeclaration | None = None
    dtype: str
    seed: int | None = None  # None: drawn per job (validation inputs differ between submissions)
    # A problem file without a Python reference: the session's reference kernel, run beside every candidate.
    reference_kernel: ReferenceKernel | None = None


class _KernelJob(_Job):
    source: str
    spec: LaunchSpec  # bound to one configuration where tuned


class EvaluateJob(_Job):
    """Compile, then as `steps` say: validate, benchmark, time the vendor baseline (no source: baseline only)."""

    type: Literal["evaluate"] = "evaluate"
    sizes: Sizes
    source: str | None = None
    spec: LaunchSpec | None = None
    steps: list[Literal["compile", "validate", "benchmark", "baseline"]] = Field(default_factory=lambda: ["compile"])
    trials: int = 3
    time_budget_s: float = 1.0
    min_reps: int = 10
    max_reps: int = 1000
    vendor_ms: float | None = None  # faster than this: validated once more on fresh inputs


class PrepareJob(_Job):
    """Before a session's first submission (no kernel): prepare the worker's checks for the problem, draw and keep
    the input sets and references its validations will ask for, at the session's sizes and at `sizes_list`, and
    start the sanitizer's standby targets where asked. Sent again after each submission for the next one's fresh
    sets and its drawn generality size."""

    type: Literal["prepare"] = "prepare"
    sizes: Sizes
    trials: int = Field(3, ge=1, le=20)  # the session's validation trials
    keep_sets: bool = True  # the sets its validations keep (False between submissions: kept by the first already)
    sizes_list: list[Sizes] = Field(default_factory=list)  # generality's sampled sizes: one trial each
    sanitizer_standby: bool = False
    # Fresh sets drawn ahead, each used once (reference_cache.SpareSets): for the fresh trial of a validation whose
    # output is small, and for the validation on fresh inputs of a version faster than the vendor library.
    spare_fresh: bool = False
    spare_revalidation: bool = False


class GeneralityJob(_KernelJob):
    """Validate at each sampled size; then (CUDA) compute-sanitizer at `sanitize_sizes`."""

    type: Literal["generality"] = "generality"
    sizes_list: list[Sizes]
    sanitize_sizes: Sizes | None = None
    sanitize_beside: bool = False  # on a GPU: the sanitizer's runs overlap the sizes (Settings.sanitizer_beside)
    sanitizer_standby: bool = True  # targets for the next run start when this one ends (Settings.sanitizer_standby)


class TuneJob(_KernelJob):
    """Compile `configs` in parallel, prune, validate once and time each briefly."""

    type: Literal["tune"] = "tune"
    sizes: Sizes
    configs: list[dict[str, int]]
    trials: int = 1
    time_budget_s: float = 0.2
    min_reps: int = 5
    max_reps: int = 200
    compile_workers: int | None = None
    retime: bool = False  # the search's contenders timed again (longer), before the best is chosen


class LaunchTarget(_KernelJob):
    """One launch of a kernel in a child process that a tool watches (sanitizer.target, under compute-sanitizer or
    Nsight Compute); written to a file for it."""

    sizes: Sizes
    device: int
    inputs_file: str | None = None  # the inputs, saved by the worker (runner.target_inputs)
    module_file: str | None = None  # the worker's compiled module (a cubin), so the target does not compile again
    backend: Literal["cuda", "hip", "hlsl"] = "cuda"  # hip: HIP source on NVIDIA, through the CUDA driver; hlsl: under
    # the Vulkan validation layer (vulkan_sanitizer.target)


class ProfileJob(_KernelJob):
    """Resources, occupancy, instruction mix and (where ncu works) counters of one kernel."""

    type: Literal["profile"] = "profile"
    sizes: Sizes
    counters: bool = True


Job = Annotated[EvaluateJob | GeneralityJob | TuneJob | ProfileJob | PrepareJob, Field(discriminator="type")]
JOB: TypeAdapter[Job] = TypeAdapter(Job)
