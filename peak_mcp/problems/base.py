"""The problem plug-in interface: ABI, inputs, reference, work counts, tolerances, naive kernels."""

from __future__ import annotations

import itertools
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from peak_mcp.core.errors import InvalidInput

Sizes = Mapping[str, int]
SAMPLED_WORK = 2.0**27  # the most one awkward size may cost (flops or bytes): generality's, describe's smoke test
ABOVE_WORK = 2.0**26  # the most one size above the session's may cost (flops or bytes): ~0.1 s on lavapipe
# In a worker's progress note: what runs now is a problem file's code, not the kernel (a hang is then the file's).
PROBLEM_CODE = "from the problem file"


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
    """rel_l2 bounds ||out - ref|| / ||ref|| (or the reference's own `norm` and `rel_l2`); each element must satisfy
    |out - ref| <= factor * floor * roundoff * scale, where `scale` is the problem's per-element error scale (for
    matmul ||a_i|| * ||b_j||), so the bound follows the error a correct kernel can have: it grows with the reduction
    length and the magnitude of the inputs. `scale_words` names that scale in a verdict; `with_lp` says the bound
    is a declared problem's (docs/problems.md, Tolerance), whose terms its references fold into their scales."""

    rel_l2: float
    roundoff: float  # unit roundoff of the accumulation (2**-24 for f32)
    factor: float = 8.0
    floor: float = 1.0
    scale_words: str = "the error scale"
    with_lp: bool = False
    lp_words: str = "the reference computed in float32 from the same inputs"  # what lp is, where with_lp
    against_kernel: bool = False  # the reference is a kernel's output (problems/kernel_reference.py)
    reduction: str | None = None  # against a kernel: L at the checked sizes and where it came from, in words

    @property
    def elementwise(self) -> float:
        return self.factor * self.floor * self.roundoff

    def describe(self) -> str:
        """The elementwise bound in words, for a verdict."""
        if self.against_kernel:
            return (f"{self.factor:g} × (spread + {self.floor:g} × (u_out × m + u_f32 × √L × max(m, s))); ref: the "
                    "reference kernel's output, spread: its run-to-run difference, m = max(|ref|, rms(ref)), s: its "
                    "change per unit roundoff when each input moves one ulp, L: the reduction length"
                    + (f", {self.reduction}" if self.reduction else ""))
        if self.with_lp:
            m = "max(|ref|, rms(ref))"
            scaled = (f"(u_out + u_f32) × {m}" if self.scale_words == m  # no error scale of its own: s is m
                      else f"(u_out × {m} + u_f32 × {self.scale_words})")
            return (f"{self.factor:g} × (|lp − ref| + {self.floor:g} × {scaled}), lp being {self.lp_words}, u_out "
                    "and u_f32 the unit roundoffs of the output's type and of float32")
        return f"{self.factor * self.floor:g} roundoffs ({self.roundoff:.2g}) times {self.scale_words}"

    def summary(self) -> str:
        """Both bounds in words, for a passing verdict."""
        if self.with_lp:
            return f"elementwise {self.describe()}; relative L2 error under a quarter of the bounds' norm"
        return f"rel L2 tolerance {self.rel_l2:.0e}, elementwise {self.describe()}"


@dataclass
class Reference:
    """Exact outputs in float64 for the checked elements (all, or a sample at huge sizes on the host), with
    the error scale of each. Arrays live in the array module the validator uses (numpy or cupy).

    The bound of element i is `tolerance.elementwise * scale[i]`: a problem whose bound has other terms (a declared
    problem's |lp - ref|) folds them into `scale`. `norm` is what the relative L2 error is relative to (||values||
    when None), `rel_l2` its bound for this output (the tolerance's when None)."""

    values: Any  # float64, flat
    indices: Any | None  # flat indices into the output, or None for every element
    scale: Any  # float64, same length as values
    norm: float | None = None
    rel_l2: float | None = None
    # True: an integer or bool output (an argmax, a mask), compared exactly: every element equal to the reference.
    exact: bool = False


class Problem(ABC):
    """What the server knows of a problem. Server-side methods (ABI, sizes, work, tolerance, naive kernels) use
    only data; worker-side ones (`make_inputs`, `reference`, `reference_at`, `perturb`) may run the problem's own
    code, and a problem whose code is untrusted (a problem file) refuses to outside a worker process."""

    name: str
    title: str
    symbols: tuple[str, ...]
    default_sizes: dict[str, int]
    dtypes: tuple[str, ...]
    backends: tuple[str, ...] = ("cuda", "hip", "hlsl")
    max_elements: int = 1 << 31  # per buffer; protects the device and the host reference
    # The vendor library a backend times as this problem's yardstick (see Executor.baseline): "gemm" for matmul;
    # None where there is none (peak_mcp.evaluation.yardsticks adds the roofline and torch ones for every problem).
    yardstick: str | None = None
    source: str = "built-in"  # where the problem comes from: built-in, or a problem file's path
    # What the problem computes beyond the ABI's line, in the problem's own words (a problem file's reference source,
    # a KernelBench model as built and its forward); empty where the ABI says it all (matmul).
    definition: str = ""
    # True: the reference is float64 arithmetic the host can redo for a few elements (reference_at), so the device's
    # reference and a timed launch's output are spot-checked on the host. False for a kernel as the reference.
    independent_reference: bool = True
    # True: the problem has no Python reference; its sessions need start_session(reference_kernel=...).
    needs_reference_kernel: bool = False
    # Size symbols that are parameters rather than extents (a filter size, a stride, a padding): generality draws
    # each from its values instead of awkward extents, never rounds or scales it, and it may be 0 where 0 is one of
    # them. Empty for most problems.
    sampled: Mapping[str, tuple[int, ...]] = MappingProxyType({})
    # Scalars the kernel gets that are expressions of the sizes (conv2d's P and Q): names the `peak:` lines may use
    # as shorthand for their expressions. Empty for most problems.
    derived: Mapping[str, str] = MappingProxyType({})
    # What kind of computation it is (peak_mcp/problems/traits.py): the catalog gives a session the texts that share
    # one. Empty: only the texts for any problem.
    traits: tuple[str, ...] = ()

    def least_size(self, symbol: str) -> int:
        """The smallest value a size symbol takes: 1, or 0 for a sampled symbol whose values hold 0."""
        return 0 if 0 in self.sampled.get(symbol, ()) else 1

    def wire(self) -> dict[str, Any]:
        """What a job carries so that the worker finds this same problem: its name (built-in classes), or its
        declaration too (problem files: the worker imports the file the declaration names, once its sha256
        matches)."""
        return {"problem": self.name}

    def reference_label(self, computed_on: str) -> str:
        """What a verdict names as the reference: where the float64 reference was computed, by default."""
        return computed_on

    def dtypes_for(self, backend: str) -> tuple[str, ...]:
        """The dtypes a backend offers for this problem (HLSL has no bf16)."""
        return tuple(d for d in self.dtypes if backend != "hlsl" or d != "bf16")

    def work(self, sizes: Sizes, dtype: str | None = None) -> float:
        """One launch's cost in one number, to keep sampled and CPU-device sizes cheap: flops or bytes moved,
        whichever is larger."""
        return max(self.flops(sizes), self.min_bytes(sizes, dtype or self.dtypes[0]))

    def scaled_sizes(self, max_flops: float, max_bytes: float) -> dict[str, int] | None:
        """The default sizes, each largest symbol halved in turn until a launch does at most `max_flops` and moves
        at most `max_bytes` (a CPU device's budget); None when they fit already or no halving meets the problem's
        own constraints."""
        sizes = dict(self.default_sizes)

        def fits(s: dict[str, int]) -> bool:
            return self.flops(s) <= max_flops and self.min_bytes(s, self.dtypes[0]) <= max_bytes

        if fits(sizes):
            return None
        while not fits(sizes):
            symbol = max((s for s in self.symbols if s not in self.sampled), key=lambda s: sizes[s], default=None)
            if symbol is None or sizes[symbol] == 1:  # no symbol (fixed shapes): nothing to halve
                return None
            sizes[symbol] = -(-sizes[symbol] // 2)
        try:
            return self.check_sizes(sizes)
        except InvalidInput:
            return None

    def source_hints(self, source: str) -> dict[str, tuple[str, ...]]:
        """Problem-specific features suggest_next reads in a kernel's source: feature name -> the transformations
        whose work it shows is done. None by default."""
        return {}

    def suggestion_score(self, tags: tuple[str, ...] | list[str], sizes: Sizes,
                         units: int | None) -> tuple[float, list[str]]:
        """A problem's own adjustment to a transformation's rank from its tags and the session's sizes (`units`:
        the device's SMs or CUs). Nothing by default."""
        return 0.0, []

    @abstractmethod
    def arguments(self, dtype: str) -> list[BufferArg | ScalarArg]:
        """Kernel arguments in ABI order: buffers first (bindings 0..n-1 in HLSL), then scalars."""

    @abstractmethod
    def abi(self, backend: str, dtype: str) -> str:
        """The argument contract, in words and code, for the agent."""

    @abstractmethod
    def make_inputs(self, sizes: Sizes, dtype: str, seed: int, xp: Any) -> dict[str, Any]:
        """Fresh random inputs (never zeros), in storage dtype, as arrays of `xp` (numpy or cupy)."""

    def stress_ranges(self) -> str:
        """The stress trial's input ranges in words ("x in (40, 100)"); "" where the problem has none."""
        return ""

    def stress_inputs(self, sizes: Sizes, dtype: str, seed: int, xp: Any) -> dict[str, Any] | None:
        """Inputs for one more validation trial, where the problem has a regime that small random inputs miss
        (large values); None: no such trial."""
        return None

    @abstractmethod
    def reference(self, inputs: Mapping[str, Any], sizes: Sizes, dtype: str, seed: int, max_flops: float,
                  xp: Any) -> dict[str, Reference]:
        """Outputs in float64 from the exact stored inputs, computed with `xp`.

        Above `max_flops` a problem may check a random sample of each output (whole rows, say) so that
        validating huge sizes on a host stays quick; every element is still checked for NaN, Inf and being
        written."""

    def host_picks(self, picks: np.ndarray, sizes: Sizes) -> np.ndarray:
        """The elements a host spot check recomputes, from those drawn (`picks`): a problem whose rows are costly
        to recompute moves them into fewer rows (DeclaredProblem: HOST_CHECK_FLOPS)."""
        return picks

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

    @property
    def own_constraints(self) -> tuple[str, ...]:
        """The problem's own conditions on its sizes (a problem file's CONSTRAINTS), which check_sizes enforces."""
        return ()

    def fast_path_sizes(self, sizes: Sizes) -> list[dict[str, int]]:
        """Those of generality_sizes whose rows keep a fast path's shape (whole 16-byte rows, the session's head
        dimension or channels): checked whatever the cap on the others (evaluation.generality.sample_sizes)."""
        return []

    def sizes_above(self, sizes: Sizes) -> list[list[dict[str, int]]]:
        """For each symbol, size sets larger than the session's in that symbol (a kernel that only breaks past a
        few thousand rows is wrong too), first choice first: the validator keeps the first of each list that meets
        the session's constraints. The symbol at least 4x the session's and 4096, rounded to a power of two plus 5
        (past any tile and any power-of-two bound a kernel has), then 2x, then just past the session's; the other
        symbols small and odd (33 is one past a 32 tile, then 19, ...) or smaller (5, 3, ...), the first choice
        within ABOVE_WORK: about as much as one of the awkward sampled sizes, on a CPU Vulkan device too. Sampled
        symbols (parameters) keep the session's value and get no group of their own."""
        groups = []
        for symbol in self.symbols:
            if symbol in self.sampled:
                continue
            s = sizes[symbol]
            group = []
            for big in dict.fromkeys((_pow2_at_least(max(4 * s, 4096)) + 5, _pow2_at_least(2 * s) + 5, s + 7)):
                if big <= s:
                    continue
                for others in ((33, 19, 17, 13), (5, 3, 3, 3)):
                    rest = itertools.cycle(others)
                    candidate = {k: big if k == symbol else sizes[k] if k in self.sampled else next(rest)
                                 for k in self.symbols}
                    try:
                        if self.work(candidate) <= ABOVE_WORK and self.check_sizes(candidate) == candidate:
                            group.append(candidate)
                            break
                    except InvalidInput:
                        continue
            groups.append(group)
        return groups

    @abstractmethod
    def flops(self, sizes: Sizes) -> float: ...

    @abstractmethod
    def min_bytes(self, sizes: Sizes, dtype: str) -> float:
        """Fewest bytes a kernel must move: each input read once, each output written once."""

    @abstractmethod
    def tolerance(self, dtype: str, sizes: Sizes | None = None) -> Tolerance: ...

    def speed_floor_ms(self, sizes: Sizes, dtype: str, peaks: Mapping[str, float], bandwidth_gbps: float | None,
                       cache_bytes: float = 0.0) -> float | None:
        """The least time one launch can take on a device: its flops at the fastest rate a correct kernel reaches
        (speed_limit), or its bytes at the memory bandwidth, whichever is longer. Bytes that could sit in the last
        level cache (`cache_bytes`) are not counted against the bandwidth. None when neither is known."""
        floors = []
        limit = self.speed_limit(dtype, peaks)
        flops = self.flops(sizes)
        if limit and flops:
            floors.append(flops / (limit * 1e12) * 1e3)
        moved = self.min_bytes(sizes, dtype) - cache_bytes
        if bandwidth_gbps and moved > 0:
            floors.append(moved / (bandwidth_gbps * 1e9) * 1e3)
        return max(floors) if floors else None

    def speed_limit(self, dtype: str, peaks: Mapping[str, float]) -> float | None:
        """The fastest rate a correct kernel can reach, in TFLOP/s, from the device's peaks; None when unknown."""
        return peaks.get(self.peak_path(dtype))

    @abstractmethod
    def peak_path(self, dtype: str, backend: str | None = None) -> str:
        """Which device peak is the yardstick: fp32 or fp16_tensor / bf16_tensor. HLSL reaches no tensor cores
        here (glslang has no cooperative matrices for it), so its sessions are judged against fp32 whatever the
        dtype; `backend` None gives the fastest path any backend has (speed_limit's bound)."""

    def has_naive(self, backend: str, dtype: str) -> bool:
        """Whether sessions on `backend` start from a naive kernel (v0); without one, the agent's first kernel is
        v0."""
        return True

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
            if isinstance(value, bool) or not isinstance(value, int) or value < self.least_size(symbol):
                raise InvalidInput(f"size {symbol}={value!r} must be a positive integer" if self.least_size(symbol)
                                   else f"size {symbol}={value!r} must be a non-negative integer", None)
            checked[symbol] = value
        for arg in self.arguments(self.dtypes[0]):
            if isinstance(arg, BufferArg) and arg.count(checked) > self.max_elements:
                raise InvalidInput(
                    f"sizes {checked} make buffer {arg.name} hold {arg.count(checked):,} elements, "
                    f"over the limit of {self.max_elements:,}",
                    "choose smaller sizes.",
                )
        return checked

    def check_dtype(self, dtype: str, backend: str | None = None) -> str:
        offered = self.dtypes_for(backend) if backend else self.dtypes
        if dtype not in offered:
            on = f" on {backend}" if backend and dtype in self.dtypes else ""
            raise InvalidInput(f"dtype {dtype!r} is not offered by {self.name}{on}", f"choose one of {list(offered)}.")
        return dtype


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()
