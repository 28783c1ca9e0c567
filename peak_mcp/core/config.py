"""Every setting in one validated object: command line over environment (`PEAK_MCP_*`) over defaults.

The server reads the environment once, here; workers get what they need from it explicitly (`worker_options`),
so a bad value fails at start with the variable's name instead of somewhere in a worker.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from peak_mcp.core.errors import InvalidInput


def default_data_dir() -> Path:
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "peak-mcp"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PEAK_MCP_", validate_assignment=True, extra="ignore")

    data_dir: Path = Field(default_factory=default_data_dir, description="where sessions are stored")
    extra_catalog_dirs: Annotated[list[Path], NoDecode] = Field(
        default_factory=list, validation_alias=AliasChoices("transformations", "PEAK_MCP_TRANSFORMATIONS"),
        description="extra transformation catalog directories, ':'-separated")
    problem_dirs: Annotated[list[Path], NoDecode] = Field(
        default_factory=list, validation_alias=AliasChoices("problems", "PEAK_MCP_PROBLEMS"),
        description="folders of problem files (docs/problems.md), ':'-separated; the names of the shipped "
                    "problems and matmul are reserved (a file declaring one is left out with an error)")
    inactivity_timeout_s: float = Field(
        30.0, gt=0, validation_alias=AliasChoices("inactivity_timeout_s", "PEAK_MCP_JOB_TIMEOUT"),
        description="seconds without progress before a job counts as hung (the worker is killed and restarted)")
    job_total_timeout_s: float = Field(
        900.0, gt=0, validation_alias=AliasChoices("job_total_timeout_s", "PEAK_MCP_JOB_MAX_SECONDS"),
        description="seconds a job may run in all, progress or not (slow CPU devices at large sizes)")
    benchmark_budget_s: float = Field(
        1.0, ge=0.05, le=60, validation_alias=AliasChoices("benchmark_budget_s", "PEAK_MCP_BENCH_SECONDS"),
        description="seconds of timed launches per benchmark")
    validation_trials: int = Field(3, ge=1, le=20, description="fresh input sets each validation runs")
    allow_define_problem: bool = Field(
        False, description="let clients of `serve --http` define problems (define_problem runs the problem's code "
                           "confined, and then in device workers); over stdio it is always on")
    sanitizer: bool = Field(True, description="after generality, where installed: compute-sanitizer on CUDA, the "
                                              "Vulkan validation layer's GPU-assisted validation on HLSL")
    generality_beside: bool = Field(
        True, description="where another device of the session's model is idle, check a submission's other sizes "
                          "and run the sanitizer there while the session's own device validates and times it")
    sanitizer_beside: bool = Field(
        False, description="on a GPU, start the sanitizer's runs before generality's sizes and wait for them after "
                           "(they overlap; nothing there is timed). Off until measured against the hostile corpora "
                           "on every kind of kernel (a cluster kernel came back not_general once with it on)")
    prepare_ahead: Literal["gpu", "always", "never"] = Field(
        "gpu", description="prepare a session's checks, input sets and references in the background when it starts "
                           "without a first version, and after each submission what the next one draws afresh (the "
                           "submissions then find them): on GPU devices only, on every device, or never")
    sanitizer_standby: bool = Field(
        True, description="on a GPU, when a sanitizer run ends, start the next run's targets (imported, their context "
                          "open) to wait for the next submission: each still takes one job and exits")
    default_max_attempts: int = Field(
        3, ge=1, le=10, validation_alias=AliasChoices("default_max_attempts", "PEAK_MCP_MAX_ATTEMPTS"),
        description="attempts apply_transformation makes by default")
    log_level: str = Field("INFO", pattern="(?i)^(debug|info|warning|error)$")
    # Read by workers: passed to them explicitly (worker_options), never read from their environment.
    cuda_arch: str = Field("sm_90a", pattern=r"^sm_\d+[af]?$",
                           validation_alias=AliasChoices("cuda_arch", "PEAK_CUDA_ARCH", "PEAK_MCP_CUDA_ARCH"),
                           description="NVRTC target where no GPU is present (compile-only sessions)")
    hip_arch: str | None = Field(None, pattern=r"^(sm_\d+[af]?|gfx[0-9a-f]+)$",
                                 validation_alias=AliasChoices("hip_arch", "PEAK_HIP_ARCH"),
                                 description="a HIP compile-only session's target: gfx90a (default where an AMD "
                                             "compiler is installed), gfx942, or sm_90a for HIP on NVIDIA")
    hip_clang: str | None = Field(None, validation_alias=AliasChoices("hip_clang", "PEAK_HIP_CLANG"),
                                  description="a clang++ that targets amdgcn, for offline AMD compiles")
    # Bounded: the wait is passed to vkWaitForFences in nanoseconds (a uint64); inf or 1e300 crashed every wait.
    vk_fence_timeout_s: float = Field(30.0, gt=0, le=86400,
                                      description="seconds a Vulkan dispatch may run before it is a hang")
    hlsl_compiler: str | None = Field(None, pattern="^(dxc|glslangValidator)$",
                                      description="dxc or glslangValidator; default: the first found")

    sandbox: bool = Field(True, description="confine compilers and device workers with Landlock where the kernel "
                          "has it (PEAK_MCP_SANDBOX=0 turns it off; the compile limits stay)")
    compile_memory_mb: int = Field(4096, ge=256, le=1 << 20,
                                   description="address space one compile may use (MiB); past it: compile_error "
                                               "resources")
    compile_cpu_s: int = Field(60, ge=1, le=3600, description="CPU seconds one compile may use")
    compile_wall_s: float = Field(120.0, gt=0, le=3600, description="seconds one compile may take in all")
    problem_memory_mb: int = Field(8192, ge=256, le=1 << 22,
                                   description="memory a problem file's code may take: the describe process and each "
                                               "problem host (a memory cgroup under root; else address space, except "
                                               "for a host that uses the GPU)")

    ray: str | None = Field(None, description="a Ray cluster's address, or `auto`: device workers run as Ray actors "
                            "(needs the `ray` extra); unset: the embedded single-host pool")

    @field_validator("extra_catalog_dirs", "problem_dirs", mode="before")
    @classmethod
    def _split_paths(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [Path(part).expanduser() for part in value.split(os.pathsep) if part.strip()]
        return value

    @property
    def database(self) -> Path:
        return self.data_dir / "peak.sqlite3"

    @property
    def defined_problems(self) -> Path:
        """Where define_problem keeps the problem files it writes."""
        return self.data_dir / "problems"

    def confinement(self) -> dict[str, Any]:
        """The compile limits and sandbox switch, as `backends.confined.configure` takes them."""
        return {"memory_bytes": self.compile_memory_mb << 20, "cpu_seconds": self.compile_cpu_s,
                "wall_seconds": self.compile_wall_s, "sandbox": self.sandbox}

    def worker_options(self, backend: str, index: int) -> dict[str, Any]:
        """What a worker of `backend` needs from the settings: its executor's keyword arguments, and under
        `confinement` the compile limits and sandbox switch (the worker applies them before opening the device)."""
        return {**self._executor_options(backend, index), "confinement": self.confinement(),
                # cupy's kernel cache: this data dir's, never one under a home that other servers share (no
                # problem file's code runs in a worker, so only cupy writes it)
                "cupy_cache": str(self.data_dir / "cache" / "cupy"),
                # read by the pool, for the problem hosts it starts beside this worker
                "problem_memory_bytes": self.problem_memory_mb << 20}

    def _executor_options(self, backend: str, index: int) -> dict[str, Any]:
        if backend == "cuda":
            return {"arch": self.cuda_arch} if index < 0 else {}  # a GPU's own arch otherwise
        if backend == "hip":
            return self.probe_options(backend)
        if backend == "hlsl":
            options: dict[str, Any] = {"fence_timeout_s": self.vk_fence_timeout_s}
            if self.hlsl_compiler:
                options["compiler"] = self.hlsl_compiler
            return options
        return {}

    def probe_options(self, backend: str) -> dict[str, Any]:
        """What the device probe of `backend` needs from the settings."""
        if backend == "hip":
            return {k: v for k, v in (("hip_arch", self.hip_arch), ("hip_clang", self.hip_clang)) if v}
        return {"compiler": self.hlsl_compiler} if backend == "hlsl" and self.hlsl_compiler else {}

    @classmethod
    def from_env(cls, data_dir: Path | None = None) -> Settings:
        """The environment's settings, `data_dir` (the command line's) winning; a bad value is an InvalidInput
        naming the variable."""
        try:
            settings = cls()
        except ValidationError as exc:
            raise _bad_setting(exc, _variable) from None
        if data_dir is not None:
            settings.data_dir = data_dir
        return settings


class HttpLimits(BaseSettings):
    """What one HTTP server lets clients hold (`serve --http`), from `PEAK_MCP_HTTP_*`; see http_limits.py."""

    model_config = SettingsConfigDict(env_prefix="PEAK_MCP_HTTP_", frozen=True, extra="ignore")

    max_connections: int = Field(1000, ge=8, le=1_000_000, description="open connections in all (fewer when the "
                                 "file limit, RLIMIT_NOFILE, leaves less room)")
    max_client_connections: int = Field(64, ge=1, le=1_000_000,
                                        description="open connections from one address (a proxy counts as one)")
    header_timeout: float = Field(5.0, gt=0, le=300, description="seconds a request's headers may take to arrive")
    body_timeout: float = Field(30.0, gt=0, le=3600, description="seconds a request's body may take after them")
    auth_failures_per_minute: int = Field(30, ge=1, le=1_000_000,
                                          description="wrong or missing tokens from one client before it gets 429")

    @classmethod
    def from_env(cls) -> HttpLimits:
        try:
            return cls()
        except ValidationError as exc:
            raise _bad_setting(exc, lambda loc: "PEAK_MCP_HTTP_" + str(loc[0] if loc else "?").upper()) from None


def _bad_setting(exc: ValidationError, variable: Callable[[tuple[Any, ...]], str]) -> InvalidInput:
    problems = "; ".join(f"{variable(e['loc'])}={e.get('input')!r}: {e['msg']}" for e in exc.errors())
    return InvalidInput(f"bad setting: {problems}", "fix or unset the environment variable.")


_ALIASES = {"extra_catalog_dirs": "TRANSFORMATIONS", "problem_dirs": "PROBLEMS", "inactivity_timeout_s": "JOB_TIMEOUT",
            "job_total_timeout_s": "JOB_MAX_SECONDS", "benchmark_budget_s": "BENCH_SECONDS",
            "default_max_attempts": "MAX_ATTEMPTS"}


def _variable(loc: tuple[Any, ...]) -> str:
    name = str(loc[0]) if loc else "?"
    if name in ("cuda_arch", "hip_arch", "hip_clang"):
        return "PEAK_" + name.upper()
    return "PEAK_MCP_" + _ALIASES.get(name, name).upper()
