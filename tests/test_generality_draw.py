"""Generality's drawn size: one size per check that no brief names and no kernel can know in advance (the fixed
awkward sizes are named in every brief, so a kernel could special-case them)."""

from __future__ import annotations

import random

from peak_mcp.evaluation.generality import DRAWN_MAX, sample_sizes, satisfies
from peak_mcp.problems.shipped import get_problem


def test_one_size_is_drawn_last_within_the_session_s_extents_and_the_constraints() -> None:
    matmul = get_problem("matmul")
    session = {"M": 4096, "N": 4096, "K": 4096}
    fixed = sample_sizes(matmul, session, [])
    drawn = [sample_sizes(matmul, session, [], draw=random.Random(seed))[-1] for seed in range(20)]
    assert all(sample_sizes(matmul, session, [], draw=random.Random(seed))[:-1] == fixed for seed in range(3))
    assert all(1 <= v <= DRAWN_MAX for d in drawn for v in d.values())
    assert len({tuple(d.values()) for d in drawn}) >= 15  # not a fixed list under another name
    costliest = max(matmul.work(s) for s in fixed)
    assert all(matmul.work(d) <= costliest for d in drawn)
    constrained = [sample_sizes(matmul, session, ["M % 64 == 0", "K % 8 == 0"], draw=random.Random(s))[-1]
                   for s in range(10)]
    assert all(satisfies(d, ["M % 64 == 0", "K % 8 == 0"]) for d in constrained)


def test_a_small_session_draws_within_its_own_extents_and_parameters_keep_the_session_s_value() -> None:
    softmax = get_problem("softmax")
    drawn = [sample_sizes(softmax, {"ROWS": 7, "COLS": 50}, [], draw=random.Random(s))[-1] for s in range(20)]
    assert all(d["ROWS"] <= 7 and d["COLS"] <= 50 for d in drawn if d != {"ROWS": 7, "COLS": 50})
    conv = get_problem("conv2d")
    session = dict(conv.default_sizes)
    for seed in range(5):
        sizes = sample_sizes(conv, session, [], draw=random.Random(seed))
        last = sizes[-1]
        assert all(last[k] == session[k] for k in conv.sampled), last  # stride, filter, ... as the session's
        assert conv.work(last) <= max(conv.work(s) for s in sizes[:-1]) or last in sizes[:-1]
