"""Element types as stored on the device, with host conversions (bf16 kept as raw uint16 bits)."""

from __future__ import annotations

import numpy as np

STORAGE = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": np.dtype(np.uint16),
           # A buffer's own storage type, whatever the session's dtype (an argmax, a mask, class targets): compared
           # exactly, never rounded. bool is one byte, 0 or 1.
           "int32": np.dtype(np.int32), "int64": np.dtype(np.int64), "uint8": np.dtype(np.uint8),
           "int8": np.dtype(np.int8), "bool": np.dtype(np.uint8)}
FLOAT_DTYPES = ("f32", "f16", "bf16")
EXACT_DTYPES = ("int32", "int64", "uint8", "int8", "bool")  # integer storage: drawn from a range, compared exactly
C_TYPES = {"f32": "float", "f16": "__half", "bf16": "__nv_bfloat16"}
# The C type of an exact buffer in CUDA and HIP (bool: one byte, as C++'s bool is on both).
EXACT_C_TYPES = {"int32": "int", "int64": "long long", "uint8": "unsigned char", "int8": "signed char",
                 "bool": "bool"}
# The full range of each exact type, [low, high): a declared range must lie within it.
# int64 stops at +-2**53: references are float64, which holds every integer only that far (a correct kernel failed
# and a wrong one passed at 2**60 before).
EXACT_LIMITS = {"int32": (-2**31, 2**31), "int64": (-2**53, 2**53), "uint8": (0, 256), "int8": (-128, 128),
                "bool": (0, 2)}


def is_exact(dtype: str) -> bool:
    return dtype in EXACT_DTYPES


def itemsize(dtype: str) -> int:
    return STORAGE[dtype].itemsize


def from_float(values: np.ndarray, dtype: str) -> np.ndarray:
    """Round float values to `dtype` storage (round to nearest even for bf16 and the exact types)."""
    if dtype in EXACT_DTYPES:
        return values.round().astype(STORAGE[dtype])
    if dtype != "bf16":
        return values.astype(STORAGE[dtype])
    bits = values.astype(np.float32, copy=False).view(np.uint32)  # numpy or cupy
    rounding = ((bits >> 16) & 1) + 0x7FFF
    return ((bits + rounding) >> 16).astype(np.uint16)


def to_float64(stored: np.ndarray, dtype: str) -> np.ndarray:
    """Stored values as float64 (exact for every exact type but int64 beyond 2**53)."""
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
