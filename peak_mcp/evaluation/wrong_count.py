"""Whether any element of an output lies outside its bound: one fused pass on a GPU.

The benchmark audits every timed launch's output (steps._LaunchAudit). Written as array expressions that is seven
kernels and float64 temporaries over the output, about 70 bytes an element: on a 134M-element KernelBench output
8 ms of audit after each 0.3 ms launch. One elementwise pass reads the stored value, the reference and the scale
once (20 bytes an element), keeps nothing, and raises a flag where an element fails. (Not a cupy ReductionKernel:
a reduction to one value runs in one thread block, 6 ms for a 6.4M-element output on an H200, 17 s of a
benchmark's 1 s budget at 134M.) The comparison is the validator's own: |got - ref| <= bound * scale, and a NaN (a
poisoned, unwritten element) fails it.
"""

from __future__ import annotations

import functools
from typing import Any

from peak_mcp.core.chunks import spans_of
from peak_mcp.core.dtypes import to_float64

# The stored value as a double in CUDA C, per session dtype (bf16 is stored as its 16 bits).
_AS_DOUBLE = {"f32": "(double)x", "f16": "(double)(float)x",
              "bf16": "(double)__uint_as_float(((unsigned int)x) << 16)",
              **{exact: "(double)x" for exact in ("int32", "int64", "uint8", "int8", "bool")}}


@functools.cache
def _flagging(dtype: str) -> Any:
    import cupy

    return cupy.ElementwiseKernel(
        "T x, float64 ref, float64 scale, float64 bound", "raw int32 flag",
        f"if (!(fabs({_AS_DOUBLE[dtype]} - ref) <= bound * scale)) flag[0] = 1;", f"peak_audit_wrong_{dtype}")


def any_wrong(xp: Any, stored: Any, dtype: str, ref: Any, scale: Any, bound: float) -> Any:
    """1 (as an array scalar of xp, left on the device without synchronizing) where some element of `stored`
    (flat, the output's storage) is outside `bound * scale` of `ref`, else 0."""
    if getattr(xp, "__name__", None) == "cupy" and dtype in _AS_DOUBLE:
        flag = xp.zeros(1, dtype=xp.int32)
        _flagging(dtype)(stored, ref, scale, float(bound), flag)
        return flag[0]
    wrong = 0
    for part in spans_of(ref.size):  # chunks: float64 temporaries of a bounded size
        got = to_float64(stored[part], dtype)
        wrong = wrong + (~(xp.abs(got - ref[part]) <= bound * scale[part])).any()
    return wrong
