"""The problem plug-in interface: ABI, inputs, reference, work counts, tolerances, naive kernels."""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from peak_mcp.errors import InvalidInput

Sizes = Mapping[str, int]


@dataclass(frozen=True)
class BufferArg:
    """A device buffer argument. `dtype` is a storage dtype name (f32, f16, bf16); `shape` is row-major."""

    name: str
    dtype: str
    shape: Callable[[Sizes], tuple[int, ...]]
    is_output: bool = False

    def count(self, sizes: Sizes) -> int:
        return math.prod(self.shape(sizes))


@dataclass(frozen=True)
class ScalarArg:
    """A 32-bit integer argument (CUDA/HIP kernel parameter, HLSL push constant)."""

    name: str
    value: Callable[[Sizes], int]


@dataclass(frozen=True)
class Tolerance:
    """rel_l2 bounds ||out - ref|| / ||ref||; each element must satisfy |out - ref| <= factor * roundoff * scale,
    where `scale` is the problem's per-element error scale (for matmul ||a_i|| * ||b_j||), so the bound follows
    the error a correct kernel can have: it grows with the reduction length and the magnitude of the inputs."""

    rel_l2: float
    roundoff: float  # unit roundoff of the accumulation (2**-24 for f32)
    factor: float = 8.0

    @property
    def elementwise(self) -> float:
        return self.factor * self.roundoff


@dataclass
class Reference:
    """Exact outputs in float64 for the checked elements (all, or a sample at huge sizes on the host), with
    the error scale of each. Arrays live in the array module the validator uses (numpy or cupy)."""

    values: Any  # float64, flat
    indices: Any | None  # flat indices into the output, or None for every element
    scale: Any  # float64, same length as values


class Problem(ABC):
    name: str
    title: str
    symbols: tuple[str, ...]
    default_sizes: dict[str, int]
    dtypes: tuple[str, ...]
    backends: tuple[str, ...] = ("cuda", "hip", "hlsl")
    max_elements: int = 1 << 31  # per buffer; protects the device and the host reference

    @abstractmethod
    def arguments(self, dtype: str) -> list[BufferArg | ScalarArg]:
        """Kernel arguments in ABI order: buffers first (bindings 0..n-1 in HLSL), then scalars."""

    @abstractmethod
    def abi(self, backend: str, dtype: str) -> str:
        """The argument contract, in words and code, for the agent."""

    @abstractmethod
    def make_inputs(self, sizes: Sizes, dtype: str, seed: int, xp: Any) -> dict[str, Any]:
        """Fresh random inputs (never zeros), in storage dtype, as arrays of `xp` (numpy or cupy)."""

    @abstractmethod
    def reference(self, inputs: Mapping[str, Any], sizes: Sizes, dtype: str, seed: int, max_flops: float,
                  xp: Any) -> dict[str, Reference]:
        """Outputs in float64 from the exact stored inputs, computed with `xp`.

        Above `max_flops` a problem may check a random sample of each output (whole rows, say) so that
        validating huge sizes on a host stays quick; every element is still checked for NaN, Inf and being
        written."""

    @abstractmethod
    def reference_at(self, inputs: Mapping[str, Any], sizes: Sizes, dtype: str, indices: np.ndarray,
                     to_host: Any) -> tuple[np.ndarray, np.ndarray]:
        """Output elements at flat `indices` (of the first output) and their error scales, computed on the host in
        float64 from only the inputs they need, fetched with `to_host`: a check independent of the device."""

    def perturb(self, inputs: dict[str, Any], refs: dict[str, Reference], sizes: Sizes, dtype: str,
                rng: Any, xp: Any) -> dict[str, tuple[int, Any]]:
        """Change one input element and update the reference to match, cheaply, so that every timed launch sees
        inputs no launch saw before (a kernel that caches results by any key then misses). Updates `inputs` and
        `refs` in place; returns {input name: (flat index, new stored value as a 1-element array)}. A problem
        without a cheap update returns {} and its timed launches reuse the validated inputs."""
        return {}

    @abstractmethod
    def generality_sizes(self, sizes: Sizes) -> list[dict[str, int]]:
        """Size sets that shake out kernels which only work at some sizes (odd, prime, below one tile, ...),
        smallest first; the validator filters them by the session's constraints."""

    def sizes_above(self, sizes: Sizes) -> list[list[dict[str, int]]]:
        """For each symbol, size sets larger than the session's in that symbol (a kernel that only breaks past a
        few thousand rows is wrong too), first choice first: the validator keeps the first of each list that meets
        the session's constraints. Cheap ones: the other symbols stay small. None by default."""
        return []

    @abstractmethod
    def flops(self, sizes: Sizes) -> float: ...

    @abstractmethod
    def min_bytes(self, sizes: Sizes, dtype: str) -> float:
        """Fewest bytes a kernel must move: each input read once, each output written once."""

    @abstractmethod
    def tolerance(self, dtype: str, sizes: Sizes | None = None) -> Tolerance: ...

    def speed_limit(self, dtype: str, peaks: Mapping[str, float]) -> float | None:
        """The fastest rate a correct kernel can reach, in TFLOP/s, from the device's peaks; None when unknown."""
        return peaks.get(self.peak_path(dtype))

    @abstractmethod
    def peak_path(self, dtype: str) -> str:
        """Which device peak is the yardstick: fp32 or fp16_tensor / bf16_tensor."""

    @abstractmethod
    def naive_kernel(self, backend: str, dtype: str) -> str: ...

    def parse_sizes(self, text: str) -> dict[str, int]:
        """'M=4096,N=2048,K=512' (or 'M=4096 N=2048'), or '4096x2048x512' in symbol order, as a size dict."""
        example = ",".join(f"{s}={v}" for s, v in self.default_sizes.items())
        hint = f"write sizes as {example!r}, as {'x'.join(map(str, self.default_sizes.values()))!r} or as an object"
        parts = [p for p in re.split(r"[,\s;]+", text.strip()) if p]
        try:
            if len(parts) == 1 and "=" not in parts[0]:
                values = [int(v) for v in parts[0].lower().split("x")]
                if len(values) != len(self.symbols):
                    raise ValueError
                return dict(zip(self.symbols, values, strict=True))
            pairs = [p.split("=", 1) for p in parts]
            return {name.strip(): int(value) for name, value in pairs}
        except ValueError:
            raise InvalidInput(f"cannot read sizes {text[:80]!r}", hint + ".") from None

    def check_sizes(self, sizes: Mapping[str, object] | None) -> dict[str, int]:
        """Complete and validate a size set; raise InvalidInput with the reason."""
        merged: dict[str, object] = dict(self.default_sizes)
        merged.update(sizes or {})
        unknown = set(merged) - set(self.symbols)
        if unknown:
            raise InvalidInput(f"unknown size symbol(s) {sorted(unknown)} for {self.name}",
                               f"{self.name} takes sizes {list(self.symbols)}.")
        checked: dict[str, int] = {}
        for symbol in self.symbols:
            value = merged[symbol]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"size {symbol}={value!r} must be a positive integer", None)
            checked[symbol] = value
        for arg in self.arguments(self.dtypes[0]):
            if isinstance(arg, BufferArg) and arg.count(checked) > self.max_elements:
                raise InvalidInput(
                    f"sizes {checked} make buffer {arg.name} hold {arg.count(checked):,} elements, "
                    f"over the limit of {self.max_elements:,}",
                    "choose smaller sizes.",
                )
        return checked

    def check_dtype(self, dtype: str) -> str:
        if dtype not in self.dtypes:
            raise InvalidInput(f"dtype {dtype!r} is not offered by {self.name}", f"choose one of {list(self.dtypes)}.")
        return dtype
