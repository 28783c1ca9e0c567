"""Issue 34, points 2 and 6: a problem file without TRAITS had its traits guessed from its buffer shapes alone, so a
LayerNorm ([ROWS, COLS] -> [ROWS, COLS]) read as elementwise and got the elementwise texts. Describe now probes the
reference in its confined child (one input element changed: which outputs move) and the guess follows what it
does: normalization, softmax, scan or elementwise; a reference that fails at the changed input keeps the shapes'
guess."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.anyio

HEAD = '''NAME = "NAME_HERE"
SIZES = {"ROWS": 4096, "COLS": 4096}
INPUTS = {"x": ("ROWS", "COLS"), "w": ("COLS",), "b": ("COLS",)}
OUTPUTS = {"y": ("ROWS", "COLS")}


'''
BODIES = {
    "layernorm34": '''def reference(x, w, b, *, xp):
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    return (x - mu) / xp.sqrt(var + 1e-5) * w[None, :] + b[None, :]
''',
    "softmax34": '''def reference(x, w, b, *, xp):
    e = xp.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
''',
    "cumsum34": '''def reference(x, w, b, *, xp):
    return xp.cumsum(x, axis=1) * w[None, :] + b[None, :]
''',
    "affine34": '''def reference(x, w, b, *, xp):
    return xp.tanh(x) * w[None, :] + b[None, :]
''',
    # a row op that runs at the smoke test's inputs and fails once an element is past 1 (the probe's change): the
    # shapes' guess (elementwise) stands
    "picky34": '''def reference(x, w, b, *, xp):
    assert abs(x).max() <= 1.0
    return x - x.mean(axis=1, keepdims=True)
''',
}
EXPECTED = {"layernorm34": "row_reduction, normalization", "softmax34": "row_reduction, softmax",
            "cumsum34": "scan", "affine34": "elementwise", "picky34": "elementwise"}


async def call(client: Any, tool: str, args: dict[str, Any]) -> Any:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return result


async def test_traits_follow_what_the_reference_does(make_client) -> None:
    async with make_client() as (client, _):
        for name, body in BODIES.items():
            answer = await call(client, "define_problem", {"source": HEAD.replace("NAME_HERE", name) + body})
            line = answer.content[0].text.splitlines()[0]
            # the probe's word where it showed something; the shapes' where it did not (the row op that fails)
            origin = "guessed from the buffer shapes alone" if name == "picky34" else \
                "read from a probe of the reference"
            assert f"traits {EXPECTED[name]} ({origin}" in line, line
        listed = {p["name"]: p for p in (await call(client, "list_problems", {})).structured_content["problems"]}
        assert listed["layernorm34"]["traits"] == ["row_reduction", "normalization"]
        assert listed["layernorm34"]["traits_guessed"] is True  # still not the file's word: TRAITS is
        # The catalog serves the LayerNorm the row texts, not the elementwise ones.
        texts = {t["id"] for t in (await call(client, "list_transformations", {
            "backend": "hlsl", "problem": "layernorm34"})).structured_content["transformations"]}
        assert "row-per-block-reduction" in texts and "elementwise-grid-stride" not in texts, texts
        scan = {t["id"] for t in (await call(client, "list_transformations", {
            "backend": "cuda", "problem": "cumsum34"})).structured_content["transformations"]}
        assert "parallel-scan" in scan, scan


async def test_declared_traits_are_never_probed_over(make_client) -> None:
    source = HEAD.replace("NAME_HERE", "declared34") + 'TRAITS = ["elementwise"]\n\n\n' + BODIES["layernorm34"]
    async with make_client() as (client, _):
        line = (await call(client, "define_problem", {"source": source})).content[0].text.splitlines()[0]
        assert "traits elementwise;" in line and "guessed" not in line, line


LAYERNORM_NO_TRAITS = '''NAME = "lnl42"
SIZES = {"ROWS": 128, "COLS": 512}
INPUTS = {"x": ("ROWS", "COLS"), "g": ("COLS",), "b": ("COLS",)}
OUTPUTS = {"y": ("ROWS", "COLS")}


def reference(x, g, b, *, xp):
    m = x.mean(axis=1, keepdims=True)
    d = x - m
    v = (d * d).mean(axis=1, keepdims=True)
    return d / xp.sqrt(v + 1e-5) * g[None, :] + b[None, :]
'''


async def test_a_probed_row_op_bounds_its_error_by_its_row_length(make_client) -> None:
    """An agent's correct naive LayerNorm (no TRAITS, no REDUCTION) failed by an ulp: L, estimated as input over
    output elements, was 1. A row op's L is at least its last axis now."""
    async with make_client() as (client, service):
        await call(client, "define_problem", {"source": LAYERNORM_NO_TRAITS})
        problem = service.problem("lnl42")
        assert {"row_reduction", "normalization"} <= set(problem.traits)
        assert problem.reduction_length({"ROWS": 128, "COLS": 512}) == 512
        assert problem.reduction_length({"ROWS": 4096, "COLS": 8}) == 8  # the row, not the longest axis
