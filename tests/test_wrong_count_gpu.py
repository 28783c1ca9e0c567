"""The benchmark audit's fused reduction on a GPU agrees with the validator's array expression: in bound, one element
out of bound (anywhere, at either end), a NaN (an unwritten, poisoned element), for every stored dtype."""

from __future__ import annotations

import numpy as np
import pytest

from peak_mcp.core.dtypes import STORAGE, from_float, to_float64
from peak_mcp.evaluation.wrong_count import any_wrong
from tests.conftest import has_device, skip_reason

pytestmark = [pytest.mark.gpu]
if not has_device("cuda"):
    pytestmark.append(pytest.mark.skip(reason=f"no CUDA GPU: {skip_reason('cuda')}"))

BOUND = 2.0


def _case(dtype: str, n: int, spoil: str, at: int):
    import cupy

    rng = np.random.default_rng(n)
    exact = dtype not in ("f32", "f16", "bf16")
    values = rng.integers(-100, 100, n).astype(np.float64) if exact else rng.standard_normal(n)
    stored = values.astype(STORAGE[dtype]) if exact else from_float(values.astype(np.float32), dtype)
    ref = to_float64(stored, dtype)  # what the kernel wrote is the reference: in bound
    scale = np.full(n, 0.0 if exact else 1e-3)
    if spoil == "far":
        ref[at] += 1.0
    elif spoil == "nan" and not exact:
        stored[at] = from_float(np.array([np.nan], np.float32), dtype)[0]
    return cupy, cupy.asarray(stored), cupy.asarray(ref), cupy.asarray(scale)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "int32", "int64", "uint8", "int8", "bool"])
@pytest.mark.parametrize(("spoil", "at"), [("none", 0), ("far", 0), ("far", -1), ("far", 777_777), ("nan", 12345)])
def test_fused_audit_agrees_with_the_expression(dtype: str, spoil: str, at: int) -> None:
    if dtype == "bool" and spoil == "far":
        pytest.skip("bool holds 0 and 1 only: a reference 1 away is checked at the integer dtypes")
    cupy, stored, ref, scale = _case(dtype, 1_000_003, spoil, at)
    fused = int(any_wrong(cupy, stored, dtype, ref, scale, BOUND))
    got = to_float64(cupy.asnumpy(stored), dtype)
    expected = int((~(np.abs(got - cupy.asnumpy(ref)) <= BOUND * cupy.asnumpy(scale))).any())
    assert fused == expected == (0 if spoil == "none" or (spoil == "nan" and dtype not in ("f32", "f16", "bf16"))
                                 else 1)
