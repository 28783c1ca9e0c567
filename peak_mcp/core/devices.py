"""Devices: profiles (devices/*.toml, the facts a program cannot read off the device, peaks above all) merged with
what a backend's probe detects into one `Device`, the shape every other module sees and sessions store.

Detected properties override the file; the file supplies peaks, family and bandwidth.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from peak_mcp.core.resources import data_dir


class _Facts(BaseModel):
    """What a profile file states and a device description carries: family, limits, peaks."""

    name: str = "unknown"
    family: str = ""  # "hopper", "cdna3", ...
    arch: str = ""  # "sm_90a", "gfx942", ...
    vendor: str = ""
    sm_count: int | None = None
    boost_clock_mhz: int | None = None
    warp_size: int | None = None
    shared_per_block_kb: int | None = None
    shared_per_sm_kb: int | None = None
    registers_per_sm: int | None = None
    l2_mb: float | None = None
    memory_gb: float | None = None
    memory_bandwidth_gbps: float | None = None
    peak_tflops: dict[str, float] = Field(default_factory=dict)


class DeviceProfile(_Facts):
    name: str
    patterns: list[str]
    source: str = ""


class Device(_Facts):
    """One device as a session sees it. Fields every backend can fill are typed; a backend's other detected
    properties (Vulkan limits, feature flags) are kept as extra fields, so the stored JSON round-trips."""

    model_config = ConfigDict(extra="allow")

    backend: str | None = None
    index: int | None = None  # -1: a compile-only target
    profile: str | None = None  # the devices/*.toml file it matched
    device_type: str | None = None  # Vulkan's: "discrete", "cpu", ...

    @property
    def is_cpu(self) -> bool:
        return self.device_type == "cpu"

    def peak(self, path: str) -> float | None:
        return self.peak_tflops.get(path)

    def summary(self) -> dict[str, Any]:
        """What an agent needs to know of the device, without the limits and feature flags a backend detects."""
        keep = ("name", "backend", "index", "arch", "family", "vendor", "device_type", "profile", "sm_count",
                "warp_size", "memory_bandwidth_gbps", "peak_tflops")
        brief = {k: v for k, v in self.model_dump(include=set(keep)).items() if v not in (None, "", {})}
        for name in ("subgroup_size", "max_shared_memory", "caveats"):
            if self.prop(name):
                brief[name] = self.prop(name)
        return brief

    def prop(self, name: str, default: Any = None) -> Any:
        """A detected property that has no typed field (e.g. a Vulkan limit)."""
        return (self.model_extra or {}).get(name, default)


def load_profiles(directory: Path | None = None) -> list[DeviceProfile]:
    profiles = []
    for path in sorted((directory or data_dir("devices")).glob("*.toml")):
        with path.open("rb") as handle:
            profiles.append(DeviceProfile(**tomllib.load(handle), source=path.name))
    return profiles


def match_profile(device_name: str, profiles: list[DeviceProfile]) -> DeviceProfile | None:
    """The profile whose longest pattern occurs in the device name (so 'H100 PCIe' beats 'H100')."""
    best: tuple[int, DeviceProfile] | None = None
    for profile in profiles:
        for pattern in profile.patterns:
            if re.search(re.escape(pattern), device_name, re.IGNORECASE) and (best is None or len(pattern) > best[0]):
                best = (len(pattern), profile)
    return best[1] if best else None


def describe(facts: dict[str, Any], profiles: list[DeviceProfile]) -> Device:
    """Merge detected facts with the matching profile: detected values win, the profile fills the gaps."""
    profile = match_profile(facts.get("name", ""), profiles)
    merged: dict[str, Any] = {"name": facts.get("name", "unknown"), "backend": facts.get("backend"),
                              "index": facts.get("index"), "profile": profile.source if profile else None}
    if profile:
        merged.update(profile.model_dump(exclude={"patterns", "name", "source"}))
    merged.update({k: v for k, v in (facts.get("properties") or {}).items() if v is not None})
    if merged.get("backend") == "cuda" and merged.get("arch") and not merged.get("family"):
        merged["family"] = cuda_family(str(merged["arch"]))
    return Device.model_validate(merged)


_CUDA_FAMILIES = {"sm_70": "volta", "sm_75": "turing", "sm_80": "ampere", "sm_86": "ampere", "sm_87": "ampere",
                  "sm_89": "ada", "sm_90": "hopper", "sm_100": "blackwell", "sm_101": "blackwell",
                  "sm_103": "blackwell", "sm_120": "blackwell", "sm_121": "blackwell"}


def cuda_family(arch: str) -> str:
    """The architecture family of an NVRTC target (sm_90a -> hopper); empty when unknown."""
    return _CUDA_FAMILIES.get(arch.rstrip("af"), "")
