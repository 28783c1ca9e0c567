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


def uniform(xp: object, seed: int, count: int) -> np.ndarray:
    """`count` float64 values uniform in [0, 1) from `seed`, drawn by xp (numpy, or cupy on the device: Philox,
    whose set-up is cheap, where cupy's default XORWOW spends most of a small draw initializing its states)."""
    if xp is np:
        return np.random.default_rng(seed).random(count)
    state = xp.random.RandomState(seed, method=xp.cuda.curand.CURAND_RNG_PSEUDO_PHILOX4_32_10)  # type: ignore[attr-defined]
    return state.random_sample(count)
