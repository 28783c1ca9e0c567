"""The inputs of a launch target (a kernel run once under compute-sanitizer, the Vulkan validation layer or Nsight
Compute), made by the worker and handed over as a file: the target process never runs a problem's code."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from peak_mcp.problems.shipped import worker_problem
from peak_mcp.runner import problem_link
from peak_mcp.runner.messages import LaunchTarget


def with_inputs(job: LaunchTarget, folder: str) -> LaunchTarget:
    """`job` with its inputs (seed 0, on the host) saved in `folder`."""
    problem = worker_problem(job.problem, job.declaration)
    problem_link.attach(problem)
    inputs = problem.make_inputs(job.sizes, job.dtype, 0, np)
    path = os.path.join(folder, "inputs.npz")
    np.savez(path, **{name: np.asarray(value) for name, value in inputs.items()})
    return job.model_copy(update={"inputs_file": path})


def load_inputs(job: LaunchTarget) -> dict[str, Any]:
    if job.inputs_file is None:
        raise ValueError("a launch target without its inputs file")
    with np.load(job.inputs_file, allow_pickle=False) as saved:
        return {name: saved[name] for name in saved.files}
