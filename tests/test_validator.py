"""The validator's pieces without a device: the elementwise bound, constraints and sampled sizes, the guard
pattern, and a data dir written by the first release opening under today's schema."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from peak_mcp.core.errors import AnnotationError, InvalidInput
from peak_mcp.core.expressions import evaluate_condition
from peak_mcp.evaluation.generality import check_constraints, sample_sizes, satisfies
from peak_mcp.evaluation.workspace import GUARD_PATTERN
from peak_mcp.problems.matmul import Matmul
from peak_mcp.store.database import MIGRATIONS, Store

MATMUL = Matmul()


def _bound_ratio(sizes: dict[str, int], got: np.ndarray, inputs: dict[str, np.ndarray]) -> np.ndarray:
    ref = MATMUL.reference(inputs, sizes, "f32", 0, float("inf"), np)["C"]
    return np.abs(got.reshape(-1) - ref.values) / (MATMUL.tolerance("f32").elementwise * ref.scale)


@pytest.mark.parametrize("sizes", [{"M": 100, "N": 77, "K": 53}, {"M": 128, "N": 128, "K": 128},
                                   {"M": 64, "N": 48, "K": 2048}])
def test_the_bound_passes_f32_accumulation_and_catches_a_1e_3_error(sizes: dict[str, int]) -> None:
    inputs = MATMUL.make_inputs(sizes, "f32", 7, np)
    a = inputs["A"].reshape(sizes["M"], sizes["K"])
    b = inputs["B"].reshape(sizes["K"], sizes["N"])
    acc = np.zeros((sizes["M"], sizes["N"]), np.float32)
    for k in range(sizes["K"]):  # sequential, no FMA: the least accurate order a correct kernel uses
        acc = acc + (a[:, k:k + 1] * b[k:k + 1, :]).astype(np.float32)
    assert _bound_ratio(sizes, acc, inputs).max() < 0.5
    one_off = acc.copy()
    one_off[3, 5] += 1e-3
    assert _bound_ratio(sizes, one_off, inputs)[3 * sizes["N"] + 5] > 1.0


def test_the_bound_catches_accumulation_in_half_precision() -> None:
    sizes = {"M": 32, "N": 32, "K": 512}
    inputs = MATMUL.make_inputs(sizes, "f32", 3, np)
    a = inputs["A"].reshape(32, 512).astype(np.float16)
    b = inputs["B"].reshape(512, 32).astype(np.float16)
    acc = np.zeros((32, 32), np.float16)
    for k in range(512):
        acc = (acc + a[:, k:k + 1] * b[k:k + 1, :]).astype(np.float16)
    assert (_bound_ratio(sizes, acc.astype(np.float32), inputs) > 1.0).mean() > 0.5


def test_the_guard_pattern_is_nan_in_every_float_type_and_not_the_poison() -> None:
    tile = np.tile(GUARD_PATTERN, 4)
    assert np.isnan(tile.view(np.float32)).all() and np.isnan(tile.view(np.float16)).all()
    bf16 = (tile.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    assert np.isnan(bf16).all()
    assert not (tile == 0xFF).all()


def test_conditions_use_the_safe_grammar() -> None:
    sizes = {"M": 256, "N": 96, "K": 64}
    assert evaluate_condition("M % 128 == 0 and not N % 64 == 0", sizes)
    assert evaluate_condition("16 <= K < 128 or M == 1", sizes)
    for hostile in ("__import__('os').system('true')", "M.__class__", "[M] == [M]", "M if N else K", "M ** 2 > 0"):
        with pytest.raises(AnnotationError):
            evaluate_condition(hostile, sizes)


def test_constraints_are_checked_when_the_session_starts() -> None:
    assert check_constraints(MATMUL, [" M % 64 == 0 "]) == ["M % 64 == 0"]
    with pytest.raises(InvalidInput):
        check_constraints(MATMUL, [""])
    with pytest.raises(AnnotationError):
        check_constraints(MATMUL, ["X % 2 == 0"])


def test_sampled_sizes_are_awkward_by_default_and_meet_declared_constraints() -> None:
    session = {"M": 4096, "N": 4096, "K": 4096}
    free = sample_sizes(MATMUL, session, [])
    assert {"M": 1, "N": 1, "K": 1} in free and {"M": 100, "N": 77, "K": 53} in free
    assert any(s["M"] > 8 * s["N"] for s in free) and any(s["K"] % 16 for s in free)
    assert session not in free and len(free) == 12
    for symbol in ("M", "N", "K"):  # and above the session's in each symbol, the others small
        above = [s for s in free if s[symbol] > session[symbol]]
        assert len(above) == 1 and above[0][symbol] >= 4 * session[symbol], (symbol, free)
        assert MATMUL.flops(above[0]) <= 2**26
    constrained = sample_sizes(MATMUL, session, ["M % 128 == 0", "N % 64 == 0"])
    assert constrained and all(satisfies(s, ["M % 128 == 0", "N % 64 == 0"]) for s in constrained)
    assert any(s["K"] % 8 for s in constrained)  # unconstrained symbols stay awkward where they can
    only_k = sample_sizes(MATMUL, session, ["K % 64 == 0"])
    assert {"M": 7, "N": 5, "K": 64} in only_k and {"M": 100, "N": 77, "K": 64} in only_k
    assert sample_sizes(MATMUL, session, ["M == 4096"]) == []  # nothing to sample: the service says unchecked


def test_sizes_above_the_session_honor_constraints_and_stay_cheap() -> None:
    small = sample_sizes(MATMUL, {"M": 96, "N": 80, "K": 72}, [])
    assert {"M": 4101, "N": 33, "K": 19} in small  # at least 4096 rows, whatever the session
    capped = sample_sizes(MATMUL, {"M": 1000, "N": 128, "K": 128}, ["M <= 3000"])
    assert max(s["M"] for s in capped) == 2053  # 4x breaks the constraint: 2x, still above the session's
    aligned = sample_sizes(MATMUL, {"M": 128, "N": 128, "K": 128}, ["M % 16 == 0", "N % 16 == 0"])
    assert {"M": 4112, "N": 48, "K": 19} in aligned and all(s["M"] % 16 == 0 for s in aligned)
    huge = sample_sizes(MATMUL, {"M": 65536, "N": 65536, "K": 65536}, [])
    assert {"M": 262149, "N": 5, "K": 3} in huge and all(MATMUL.flops(s) <= 2**26 for s in huge[9:])


FIRST_RELEASE_SCHEMA = """
CREATE TABLE sessions (id TEXT PRIMARY KEY, problem TEXT NOT NULL, backend TEXT NOT NULL, dtype TEXT NOT NULL,
    sizes TEXT NOT NULL, device TEXT NOT NULL, device_index INTEGER NOT NULL, head INTEGER, baseline TEXT,
    created_at REAL NOT NULL, label TEXT);
CREATE TABLE versions (session_id TEXT NOT NULL REFERENCES sessions(id), number INTEGER NOT NULL, parent INTEGER,
    origin TEXT NOT NULL, transformation TEXT, apply_id TEXT, attempt INTEGER, source TEXT NOT NULL,
    status TEXT NOT NULL, failure TEXT, message TEXT, compile TEXT, validation TEXT, timing TEXT,
    created_at REAL NOT NULL, PRIMARY KEY (session_id, number));
"""


def test_a_data_dir_from_the_first_release_opens_and_migrates(tmp_path: Path) -> None:
    path = tmp_path / "peak.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(FIRST_RELEASE_SCHEMA)
    db.execute("INSERT INTO sessions VALUES ('s1', 'matmul', 'hlsl', 'f32', ?, 'lavapipe', 0, 0, NULL, 1.0, NULL)",
               (json.dumps({"M": 64, "N": 64, "K": 64}),))
    db.execute("INSERT INTO versions (session_id, number, origin, source, status, timing, created_at) "
               "VALUES ('s1', 0, 'naive', 'src', 'benchmarked', ?, 1.0)", (json.dumps({"median_ms": 2.5}),))
    db.commit()
    db.close()

    store = Store(path)
    try:
        assert store._db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        version = store.version("s1", 0)
        assert version.timing and version.timing.model_dump() == {"median_ms": 2.5}  # as stored, nothing added
        assert version.generality is None and version.tuning is None
        session = store.session("s1")
        assert session.constraints == [] and session.device_info is None  # columns added by migrations, read back
        store.update_version("s1", 0, generality={"passed": True, "sizes_checked": [], "failures": []})
        generality = store.version("s1", 0).generality
        assert generality and generality.passed is True
    finally:
        store.close()
    Store(path).close()  # opening again applies nothing twice


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_a_perturbed_input_keeps_the_reference_exact(dtype: str) -> None:
    sizes = {"M": 37, "N": 29, "K": 41}
    inputs = MATMUL.make_inputs(sizes, dtype, 5, np)
    refs = MATMUL.reference(inputs, sizes, dtype, 0, float("inf"), np)
    rng = np.random.default_rng(9)
    for _ in range(20):
        changed = MATMUL.perturb(inputs, refs, sizes, dtype, rng, np)
        assert list(changed) == ["A"] and inputs["A"][changed["A"][0]] == changed["A"][1][0]
    fresh = MATMUL.reference(inputs, sizes, dtype, 0, float("inf"), np)["C"]
    np.testing.assert_allclose(refs["C"].values, fresh.values, rtol=0, atol=1e-12)
    np.testing.assert_allclose(refs["C"].scale, fresh.scale, rtol=1e-12)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_elements_recomputed_from_their_rows_and_columns_match_the_reference(dtype: str) -> None:
    sizes = {"M": 23, "N": 31, "K": 17}
    inputs = MATMUL.make_inputs(sizes, dtype, 2, np)
    ref = MATMUL.reference(inputs, sizes, dtype, 0, float("inf"), np)["C"]
    picks = np.array([0, 5, 200, 23 * 31 - 1])
    values, scale = MATMUL.reference_at(inputs, sizes, dtype, picks, np.asarray)
    np.testing.assert_allclose(values, ref.values[picks], rtol=1e-13)
    np.testing.assert_allclose(scale, ref.scale[picks], rtol=1e-13)


def test_speed_limits_follow_the_datasheet_paths() -> None:
    peaks = {"fp32": 66.9, "tf32_tensor": 494.7, "fp16_tensor": 989.4}
    assert MATMUL.speed_limit("f32", peaks) == pytest.approx(494.7 / 3)  # 3xTF32 keeps f32 accuracy
    assert MATMUL.speed_limit("f32", {"fp32": 66.9}) == 66.9
    assert MATMUL.speed_limit("f16", peaks) == 989.4 and MATMUL.speed_limit("bf16", peaks) is None


def test_tensor_core_bounds_widen_with_k_and_f32_does_not() -> None:
    short, long = MATMUL.tolerance("f16", {"M": 64, "N": 64, "K": 4096}), MATMUL.tolerance("f16", {"K": 65536})
    assert long.rel_l2 == 4 * short.rel_l2 and long.elementwise == 4 * short.elementwise
    assert MATMUL.tolerance("f32", {"K": 65536}) == MATMUL.tolerance("f32", {"K": 64})


def test_matmul_generality_reaches_a_16_byte_aligned_size_that_is_no_tile_multiple() -> None:
    """A fast path guarded by row alignment (TMA, vector loads) must be checked at partial tiles too, not only
    through its fallback at odd sizes."""
    from peak_mcp.evaluation.generality import sample_sizes
    from peak_mcp.problems.shipped import get_problem

    sampled = sample_sizes(get_problem("matmul"), {"M": 4096, "N": 4096, "K": 4096}, [])
    aligned = [s for s in sampled if s["N"] % 8 == 0 and s["K"] % 8 == 0 and (s["N"] % 128 or s["K"] % 64)]
    assert aligned, sampled


def test_a_wrong_result_says_where_the_wrong_elements_lie() -> None:
    """Issue 23: a conv2d kernel that clamped its padding and an attention kernel that ignored the causal mask got
    only a count and the first three elements; the verdict now names the border, or the indices that hold them."""
    from peak_mcp.evaluation.checks import wrong_pattern

    conv = np.zeros((2, 9, 9, 8), bool)  # N, P, Q, K: the outputs whose taps reach the padding
    conv[:, [0, 8]] = conv[:, :, [0, 8]] = True
    assert "within 1 of the edges of dimensions 1 and 2 and the interior is right" in wrong_pattern(conv)
    causal = np.ones((1, 2, 64, 32), bool)  # B, H, S, D: the last query row sees every key anyway
    causal[:, :, 63] = False
    assert wrong_pattern(causal) == "wrong elements: along dimension 2 only at indices 0..62 (of 0..63)"
    assert wrong_pattern(np.random.default_rng(0).random((2, 9, 9, 8)) < 0.3) is None  # no shape: nothing said
