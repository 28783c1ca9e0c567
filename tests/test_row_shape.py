"""Row texts ranked by the session's rows (problems/row_shape.py): how many rows, how long. An agent's LayerNorm session
at KernelBench's sizes (16 rows of 4M elements, H200) was offered row-per-warp first ("one warp per row for short
rows"), and nothing for few long rows; row-split-cluster is that text now, and row-per-warp says why not here."""

from __future__ import annotations

from pathlib import Path

import pytest

from peak_mcp.catalog.transformations import Catalog, builtin_transformations_dir
from peak_mcp.problems.declared import DeclaredProblem
from peak_mcp.problems.registry import describe_in_subprocess
from peak_mcp.problems.row_shape import RowShape, row_shape, row_suggestion
from peak_mcp.problems.shipped import get_problem

DATA = Path(__file__).resolve().parent / "data" / "kernelbench"


def _layernorm() -> DeclaredProblem:
    pytest.importorskip("torch")
    # the published file, read as the server reads it: in the confined child
    return DeclaredProblem(describe_in_subprocess(DATA / "kb_40_layernorm.py", timeout_s=120))


def test_a_layernorm_row_is_the_axes_its_weight_spans() -> None:
    problem = _layernorm()
    sizes = dict(problem.default_sizes)
    assert row_shape(problem.declaration, sizes) == RowShape(rows=16, length=64 * 256 * 256)
    tags = {t.id: t.tags for t in Catalog.load(builtin_transformations_dir()).list()}
    split, _ = problem.suggestion_score(tags["row-split-cluster"], sizes, 132)
    warp, why = problem.suggestion_score(tags["row-per-warp"], sizes, 132)
    persistent, _ = problem.suggestion_score(tags["persistent-rows"], sizes, 132)
    assert split > 0 > warp and persistent < 0 and "4,194,304 elements" in why[0]
    # many rows of the same length: a block per row fills the device, no split
    many = {**sizes, "BATCH_SIZE": 4096}
    assert problem.suggestion_score(tags["row-split-cluster"], many, 132)[0] < 0


@pytest.mark.parametrize(("name", "length"), [("row_sum", 8192), ("softmax", 8192), ("rmsnorm", 8192)])
def test_shipped_row_problems_read_their_rows(name: str, length: int) -> None:
    problem = get_problem(name)
    shape = row_shape(problem.declaration, {"ROWS": 1000, "COLS": length})
    assert shape == RowShape(rows=1000, length=length)
    short = row_shape(problem.declaration, {"ROWS": 100000, "COLS": 512})
    assert row_suggestion(("short-rows",), short, 132) == (0.0, [])
    assert row_suggestion(("short-rows",), shape, 132)[0] < 0  # 8192 elements: a warp per row is slower there


def test_no_row_trait_no_ranking_and_unreadable_shapes_rank_nothing() -> None:
    matmul_like = get_problem("conv2d")
    assert matmul_like.suggestion_score(("long-rows",), dict(matmul_like.default_sizes), 132) == (0.0, [])
    assert row_suggestion(("long-rows",), None, 132) == (0.0, [])


def test_the_data_is_the_largest_input_and_odd_extents_read_as_nothing() -> None:
    """Review 43 (F6): a per-row parameter declared first is no row of data, and negative or zero extents (whose
    product can still be positive) give no shape to rank by."""
    problem = _layernorm()
    declaration = problem.declaration
    flipped = declaration.model_copy(update={"inputs": list(reversed(declaration.inputs))})
    sizes = dict(problem.default_sizes)
    assert row_shape(flipped, sizes) == row_shape(declaration, sizes) == RowShape(16, 64 * 256 * 256)
    assert row_shape(declaration, {**sizes, "BATCH_SIZE": -2, "FEATURES": -64}) is None
    assert row_shape(declaration, {**sizes, "DIM1": 0}) is None
    assert row_suggestion(("long-rows",), RowShape(200, 100_000), 132)[1] == [
        "200 rows for 132 SMs: a block per row already fills the device"]
    assert row_suggestion(("long-rows",), RowShape(16, 1000), 132)[1] == ["rows of 1,000 elements: short enough for "
                                                                           "one block each"]
