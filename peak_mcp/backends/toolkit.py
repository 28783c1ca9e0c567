"""The device tools beside a backend (the CUDA toolkit's command-line tools, the Vulkan validation layer): found,
said missing and stopped the same way by the backends' probes and by every job that runs them."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import sys
from pathlib import Path

LAYER = "VK_LAYER_KHRONOS_validation"
_LAYER_DIRS = ("/usr/local/etc/vulkan/explicit_layer.d", "/usr/local/share/vulkan/explicit_layer.d",
               "/etc/vulkan/explicit_layer.d", "/usr/share/vulkan/explicit_layer.d")


def find_tool(name: str) -> str | None:
    """A CUDA tool on PATH, under $CUDA_HOME/$CUDA_PATH or /usr/local/cuda, in a pip wheel (nvidia/cu13/bin), or
    (ncu) in Nsight Compute's own install directory."""
    found = shutil.which(name)
    if found:
        return found
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    candidates = [Path(h, "bin", name) for h in homes if h]
    candidates += [Path(p, "nvidia", "cu13", "bin", name) for p in sys.path if p]
    if name == "ncu":
        candidates += [Path(p) for p in sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True)]
    return next((str(c) for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


def kill_tree(pid: int) -> None:
    """SIGKILL a process and its descendants (compute-sanitizer's target is its child)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    todo, doomed = [pid], []
    while todo:
        current = todo.pop()
        doomed.append(current)
        todo += children.get(current, [])
    for victim in doomed:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(victim, signal.SIGKILL)


def sanitizer_missing() -> dict[str, str]:
    return {"what": "compute-sanitizer", "why": "not on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin",
            "fix": "install the CUDA toolkit's sanitizer (e.g. apt-get install cuda-sanitizer-13-0) or put it on "
                   "PATH; without it, accesses far outside a buffer and shared-memory races go unchecked"}


def layer_manifest() -> str | None:
    """The validation layer's manifest where the Vulkan loader looks for explicit layers; None when absent."""
    dirs = [d for var in ("VK_LAYER_PATH", "VK_ADD_LAYER_PATH") for d in os.environ.get(var, "").split(os.pathsep)
            if d]
    data_dirs = [os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local/share")]
    data_dirs += (os.environ.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share").split(os.pathsep)
    dirs += [str(Path(d, "vulkan", "explicit_layer.d")) for d in data_dirs if d] + list(_LAYER_DIRS)
    for folder in dict.fromkeys(dirs):
        for manifest in sorted(Path(folder).glob("*.json")) if Path(folder).is_dir() else []:
            try:
                if json.loads(manifest.read_text()).get("layer", {}).get("name") == LAYER:
                    return str(manifest)
            except (OSError, ValueError, AttributeError):
                continue
    return None


def validation_layer_missing() -> dict[str, str]:
    return {"what": f"Vulkan validation layer ({LAYER})",
            "why": "no layer manifest in VK_LAYER_PATH or the loader's explicit_layer.d folders",
            "fix": "install it (Debian/Ubuntu: apt-get install vulkan-validationlayers; elsewhere the LunarG Vulkan "
                   "SDK); without it, a read past a buffer whose value the shader then discards goes unchecked "
                   "on Vulkan"}
