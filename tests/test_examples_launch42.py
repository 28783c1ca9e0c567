"""Every shipped example kernel launches at the largest sizes generality evaluates (evaluation/generality.py
largest_sizes, launch_breach), in every configuration its `// peak: params` allow: a shipped example that breaks the
launch limits would be judged not_general. The HIP warp_reduce matmul put M on grid y (65,535 blocks at most)."""

from __future__ import annotations

import itertools

import pytest

from peak_mcp.backends.registry import launch_spec
from peak_mcp.evaluation.generality import largest_sizes, launch_breach
from peak_mcp.problems.shipped import get_problem
from tests.conftest import ROOT

EXAMPLES = ROOT / "examples"

BACKENDS = {".cu": "cuda", ".hip": "hip", ".hlsl": "hlsl"}
KERNELS = sorted(p for p in EXAMPLES.rglob("*") if p.suffix in BACKENDS and "faults" not in p.parts)


@pytest.mark.parametrize("path", KERNELS, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_example_launches_at_the_largest_sizes(path) -> None:
    problem = get_problem(path.relative_to(EXAMPLES).parts[0])
    spec = launch_spec(path.read_text(), BACKENDS[path.suffix], problem.symbols, problem.derived).on_device(132)
    sizes = largest_sizes(problem, dict(problem.default_sizes), [])
    assert sizes, "no larger sizes: nothing checked"
    configs = list(itertools.product(*spec.params.values()))[:4096]
    for values in configs or [()]:
        params = dict(zip(spec.params, values, strict=True)) if spec.params else None
        if params is not None and spec.violated(problem.default_sizes, params):
            continue
        failure = launch_breach(spec, sizes, params)
        assert failure is None, f"{params}: {failure.message}"
