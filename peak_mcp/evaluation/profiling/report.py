"""What a profile says about one compiled kernel: each section with `available` and, when it is not, `why` (what
is missing and how to get it), so an agent always learns why a number is absent."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class Section(BaseModel):
    available: bool = True
    why: str | None = None  # set when unavailable: what is missing, and how to get it


class Resources(Section):
    """Per-thread and per-block resources of the entry kernel, as the compiler allocated them."""

    registers: int | None = None  # per thread
    static_shared_bytes: int | None = None  # declared __shared__ / groupshared, per block
    dynamic_shared_bytes: int | None = None  # from the launch annotation at the session's sizes
    local_bytes: int | None = None  # stack frame per thread: local arrays and spills
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    max_threads_per_block: int | None = None  # __launch_bounds__ / [numthreads]
    block: tuple[int, int, int] | None = None
    source: str | None = None
    note: str | None = None


class Occupancy(Section):
    """Resident blocks and warps per SM for the launch, and which limit binds."""

    block_threads: int | None = None
    warps_per_block: int | None = None
    shared_per_block_bytes: int | None = None  # static + dynamic + the per-block reservation, rounded up
    blocks_per_sm: int | None = None
    warps_per_sm: int | None = None
    max_warps_per_sm: int | None = None
    occupancy: float | None = None  # warps_per_sm / max_warps_per_sm
    limited_by: list[str] = Field(default_factory=list)
    blocks_by_limit: dict[str, int] = Field(default_factory=dict)  # registers, shared, warps, blocks
    driver_blocks_per_sm: int | None = None  # the CUDA driver's own answer, where a GPU was present
    waves_per_simd: int | None = None  # AMD: the compiler's figure from registers and LDS
    device_limits: dict[str, Any] = Field(default_factory=dict)
    note: str | None = None


class InstructionMix(Section):
    """Static counts: each instruction of the code once, however often a loop runs it."""

    source: str | None = None  # the tool or format counted
    counts: str | None = None  # what the numbers are: static counts of the code, never executed counts
    total: int | None = None
    groups: dict[str, int] = Field(default_factory=dict)  # fp32, fp16, tensor, integer, memory, control, ...
    ops: dict[str, int] = Field(default_factory=dict)  # the arithmetic that matters: FFMA, HMMA.16816.F32, OpFMul
    memory: dict[str, int] = Field(default_factory=dict)  # LDG.128, LDS.32, StorageBuffer.load.128, ...


class Counters(Section):
    """Nsight Compute metrics of one launch at `sizes`."""

    sizes: dict[str, int] | None = None
    metrics: dict[str, float | str] = Field(default_factory=dict)  # readable name -> value in `units`
    units: dict[str, str] = Field(default_factory=dict)
    seconds: float | None = None


class ProfileReport(BaseModel):
    backend: str
    entry: str
    device: str
    arch: str | None = None
    resources: Resources
    occupancy: Occupancy
    instruction_mix: InstructionMix
    counters: Counters

    def lean(self) -> dict[str, Any]:
        """The report without empty fields (None, {}, []), for responses read by an LLM."""
        return _prune(self.model_dump(mode="json", exclude_none=True))


def _prune(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _prune(v) for k, v in value.items() if v not in ({}, [], None)}
    return value


def unavailable(model: type[Section], why: str, **fields: Any) -> Any:
    return model(available=False, why=why, **fields)


def static_counts(code: str) -> str:
    """What a mix's numbers are, said where an agent reads them."""
    return (f"static: each instruction in the {code} counted once, however often it runs (not executed counts; "
            "a loop body counts once)")
