"""A vendor library's matmul becomes the yardstick only when three rows of its product agree with float64 (the check
cuBLAS and hipBLAS share); a wrong call leaves the session without a yardstick and says why."""

from __future__ import annotations

import numpy as np

from peak_mcp.backends.base import vendor_matmul_result

SIZES = {"M": 5, "N": 3, "K": 4}


def _inputs(dtype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    a, b = rng.random(20, dtype=np.float32), rng.random(12, dtype=np.float32)
    if dtype == "bf16":  # bf16 storage: the high halves of f32 words
        a, b = ((x.view(np.uint32) >> 16).astype(np.uint16) for x in (a, b))
        x64 = (a.astype(np.uint32) << 16).view(np.float32).reshape(5, 4) @ \
            (b.astype(np.uint32) << 16).view(np.float32).reshape(4, 3)
        return a, b, x64.astype(np.float32).reshape(-1)
    return a, b, (a.reshape(5, 4).astype(np.float64) @ b.reshape(4, 3)).astype(np.float32).reshape(-1)


def test_a_right_product_is_the_yardstick_with_its_error() -> None:
    for dtype in ("f32", "bf16"):
        a, b, c = _inputs(dtype)
        result = vendor_matmul_result("lib", c, a, b, dtype, SIZES, {"median_ms": 1.0})
        assert result["available"] and result["library"] == "lib" and result["median_ms"] == 1.0
        assert result["rel_l2_error"] < 1e-6


def test_a_wrong_product_or_nan_is_no_yardstick() -> None:
    a, b, c = _inputs("f32")
    transposed = c.reshape(5, 3).T.copy().reshape(-1)[:15]  # e.g. operands in the wrong order
    for wrong in (transposed, np.full(15, np.nan, np.float32), c * 1.01):
        result = vendor_matmul_result("cuBLAS", wrong, a, b, "f32", SIZES, {"median_ms": 1.0})
        assert result["available"] is False and "cuBLAS returned a wrong product" in result["reason"]
        assert "median_ms" not in result
