"""Element types as stored on the device, with host conversions (bf16 kept as raw uint16 bits)."""

from __future__ import annotations

import numpy as np

STORAGE = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": np.dtype(np.uint16)}
C_TYPES = {"f32": "float", "f16": "__half", "bf16": "__nv_bfloat16"}


def itemsize(dtype: str) -> int:
    return STORAGE[dtype].itemsize


def from_float(values: np.ndarray, dtype: str) -> np.ndarray:
    """Round float values to `dtype` storage (round to nearest even for bf16)."""
    if dtype != "bf16":
        return values.astype(STORAGE[dtype])
    bits = values.astype(np.float32, copy=False).view(np.uint32)  # numpy or cupy
    rounding = ((bits >> 16) & 1) + 0x7FFF
    return ((bits + rounding) >> 16).astype(np.uint16)


def to_float64(stored: np.ndarray, dtype: str) -> np.ndarray:
    if dtype != "bf16":
        return stored.astype(np.float64)
    return (stored.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
