"""doctor's report as an agent gets it: toolkit paths as labels, not where this host keeps them.

An agent needs to know what is there (NVRTC 13 with its headers, a HIP device header, ROCm's clang), not that the
headers sit in /home/alice/proj/.venv/lib/python3.11/site-packages/nvidia/cu13/include: that names the user, the
checkout and the venv of a host the agent may only reach over HTTP. The labels follow compiler diagnostics
(`<hip>/hip_runtime.h`, see backends/amd_offline.py): `<cuda>` the CUDA tree whose include/ NVRTC reads, `<hip>` the
directory of hip_runtime.h, `<rocm>` the ROCm tree, `<peak-mcp>` this package, `<catalog>` the shipped
transformations, `<python>` the environment the server runs in, `~` the server's home. System locations left over
(/usr/bin/glslangValidator) say nothing of the host and stay as they are.

The data dir is named from home (`~/.local/share/peak-mcp`), which tells the user of a desktop client where the
sessions are without the user name; a data dir outside home is left out (null): no tool takes a path, and
`peak-mcp doctor` on the host prints the whole of it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import peak_mcp
from peak_mcp.catalog.transformations import builtin_transformations_dir
from peak_mcp.loop.models import DoctorReport, ProblemList

# Never labelled: a ROCm tree or a Python in /usr is the system's, with nothing to hide, and labelling /usr would
# turn /usr/bin/glslangValidator into nonsense.
SYSTEM_PREFIXES = frozenset({"/", "/usr", "/usr/local"})


def for_agent(report: DoctorReport) -> DoctorReport:
    """The report with every known host path replaced by its label, and the data dir as described above."""
    dumped = report.model_dump(mode="json")
    home = Path.home()
    data_dir = Path(report.data_dir) if report.data_dir else None
    labels = _labels(dumped, home)
    dumped = _relabel(dumped, labels)
    dumped["data_dir"] = (f"~/{data_dir.relative_to(home)}" if data_dir and str(home) not in SYSTEM_PREFIXES
                          and data_dir.is_relative_to(home) else None)
    return DoctorReport.model_validate(dumped)


def _labels(report: dict[str, Any], home: Path) -> list[tuple[str, str]]:
    """(prefix, label), longest prefix first, each path also as its real path (a symlinked venv or toolkit)."""
    found: list[tuple[str, str]] = [(str(Path(peak_mcp.__file__).parent), "<peak-mcp>"),
                                    (str(builtin_transformations_dir()), "<catalog>"),
                                    (sys.prefix, "<python>")]
    found.append((str(home), "~"))
    for key, value in _items(report):
        if key == "include_dirs" and isinstance(value, list):  # NVRTC's CUDA headers: <cuda>/include(/cccl)
            found += [(_toolkit_root(d), "<cuda>") for d in value]
        elif key == "header" and isinstance(value, str) and Path(value).parent.name == "hip":
            found.append((str(Path(value).parent), "<hip>"))
        elif key == "rocm_path" and isinstance(value, str):
            found.append((value, "<rocm>"))
    pairs = {(variant.rstrip(os.sep) or os.sep, label) for path, label in found
             for variant in (path, os.path.realpath(path))}
    return sorted(((p, label) for p, label in pairs if p not in SYSTEM_PREFIXES), key=lambda pair: len(pair[0]),
                  reverse=True)


def _toolkit_root(include_dir: str) -> str:
    """The tree above an include directory (`.../include` or `.../include/cccl`), or the directory itself."""
    path = Path(include_dir)
    above = next((p for p in (path, *path.parents) if p.name == "include"), None)
    return str(above.parent) if above is not None else include_dir


def _items(value: Any) -> list[tuple[str, Any]]:
    """Every (key, value) of every dict in a JSON value."""
    if isinstance(value, dict):
        return [pair for key, item in value.items() for pair in [(key, item), *_items(item)]]
    if isinstance(value, list):
        return [pair for item in value for pair in _items(item)]
    return []


def _relabel(value: Any, labels: list[tuple[str, str]]) -> Any:
    if isinstance(value, str):
        for prefix, label in labels:
            value = label if value == prefix else value.replace(prefix + os.sep, label + "/")
        return value
    if isinstance(value, dict):
        return {key: _relabel(item, labels) for key, item in value.items()}
    if isinstance(value, list):
        return [_relabel(item, labels) for item in value]
    return value


def problems_for_agent(listed: ProblemList) -> ProblemList:
    """list_problems' answer with the same labels: a shipped problem file is `<peak-mcp>/problems/builtin/...`, one
    in the server's home `~/...`; an operator's folder elsewhere is named as it is (the agent needs to name it)."""
    dumped = listed.model_dump(mode="json")
    return ProblemList.model_validate(_relabel(dumped, _labels({}, Path.home())))
