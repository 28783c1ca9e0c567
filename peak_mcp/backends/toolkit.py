"""The CUDA toolkit's command-line tools, found and stopped the same way by every job that runs them."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import sys
from pathlib import Path


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
