"""Device profiles (devices/*.toml): the facts a program cannot read off the device, peaks above all.

Detected properties override the file; the file supplies peaks, family and bandwidth.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from peak_mcp.resources import data_dir


class DeviceProfile(BaseModel):
    name: str
    patterns: list[str]
    family: str = ""
    arch: str = ""
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
    source: str = ""


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


def describe(facts: dict[str, Any], profiles: list[DeviceProfile]) -> dict[str, Any]:
    """Merge detected facts with the matching profile: detected values win, the profile fills the gaps."""
    profile = match_profile(facts.get("name", ""), profiles)
    merged: dict[str, Any] = {"name": facts.get("name", "unknown"), "backend": facts.get("backend"),
                              "index": facts.get("index"), "profile": profile.source if profile else None}
    if profile:
        merged.update(profile.model_dump(exclude={"patterns", "name", "source"}))
    merged.update({k: v for k, v in (facts.get("properties") or {}).items() if v is not None})
    if "arch" in merged and isinstance(merged["arch"], str):
        merged["arch_family"] = merged.get("family", "")
    return merged


_CUDA_FAMILIES = {"sm_70": "volta", "sm_75": "turing", "sm_80": "ampere", "sm_86": "ampere", "sm_87": "ampere",
                  "sm_89": "ada", "sm_90": "hopper", "sm_100": "blackwell", "sm_101": "blackwell",
                  "sm_103": "blackwell", "sm_120": "blackwell", "sm_121": "blackwell"}


def cuda_family(arch: str) -> str:
    """The architecture family of an NVRTC target (sm_90a -> hopper); empty when unknown."""
    return _CUDA_FAMILIES.get(arch.rstrip("af"), "")
