"""Problems as data plus a reference: a problem file's declaration (`ProblemDeclaration`, pure data) and the
`DeclaredProblem` built from it.

The server reads a declaration (sizes, buffers, expressions, kernel texts) and never the file's Python: a
declaration comes from a confined subprocess (`peak_mcp.problems.describe`) and is validated here like any other
untrusted JSON. The worker-side methods (`make_inputs`, `reference`, `reference_at`) import the file, after
checking its sha256 against the declaration's, and only in a process that said it is a worker
(`allow_problem_code`): anywhere else they refuse. docs/problems.md describes the format.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import keyword
import math
import re
import sys
import threading
import types
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from peak_mcp.core.dtypes import from_float, itemsize, to_float64, uniform
from peak_mcp.core.errors import AnnotationError, InvalidInput, PeakError
from peak_mcp.core.launch import _FUNCS, SM_COUNT, evaluate, evaluate_condition
from peak_mcp.problems.base import BufferArg, Problem, Reference, ScalarArg, Sizes, Tolerance
from peak_mcp.problems.code import LocalCode, ProblemCode, fix_hint

BACKEND_NAMES = ("cuda", "hip", "hlsl")
# What a kernel text may not hold (every other client reads a naive kernel as its v0): controls but tab, newline and
# carriage return, and the invisible format characters text_safety.clean drops.
KERNEL_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u180e\u200b-\u200f\u2028-\u202e"
                             "\u2060-\u2069\ufeff\U000e0000-\U000e007f]")
DTYPE_NAMES = ("f32", "f16", "bf16")
TENSOR_PEAK = {"f16": "fp16_tensor", "bf16": "bf16_tensor"}  # TENSOR_CORES problems' speed limit per dtype
UNIT_ROUNDOFF = {"f32": 2.0**-24, "f16": 2.0**-11, "bf16": 2.0**-8}
MAX_SYMBOLS, MAX_BUFFERS, MAX_RANK = 12, 16, 4
MAX_SAMPLES = 8  # values per sampled symbol
MAX_KERNEL_CHARS = 256 * 1024
MAX_ELEMENTS = 1 << 31  # per buffer, as for every problem
NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")
# Names the ABI or grammar uses. SM_COUNT: the device's multiprocessor count in launch expressions, which a size
# symbol of that name silently lost to (and a scalar of that name would hide).
RESERVED = frozenset({*_FUNCS, SM_COUNT, "p", "T", "xp", "dtype", "to_f32", "from_f32", "main"})

# Tolerance defaults (docs/problems.md, Tolerance; DeclaredProblem.references): the bound of element i is
# FACTOR * (|lp_i - ref_i| + FLOOR * (u_out * m_i + u_f32 * s_i)), and the relative L2 error stays under REL_L2_SHARE
# of the bounds' norm. Measured with tools/false_failures.py (every shipped kernel of every problem, at every sampled
# size) and a simulation of summation orders and fast-math exp at the default sizes: see the commit that set them.
FACTOR = 2.0
FLOOR = 4.0
REL_L2_SHARE = 0.25
COMPUTE_ROUNDOFF = 2.0**-24  # kernels compute in f32 whatever the storage type

# Sizes the generality check samples (see generality_sizes): per symbol, in declaration order, cycled.
_BELOW_TILE = (7, 5, 3, 6)
_ODD = (100, 77, 53, 91)
_PRIMES = (97, 89, 101, 103)
_PAST_POW2 = (65, 129, 33, 257)
_SMALL = (7, 67, 5, 35)
# Rows of whole 16-byte chunks (TMA, vector loads) with nothing else a tile multiple: the extents that end some
# buffer's shape take multiples of 8 that no tile of 16 divides, the others small odd values.
_PITCHED = (72, 40, 24, 136)
_RAGGED = (3, 13, 11, 7)
SAMPLED_WORK = 2.0**27  # the most one awkward size may cost
# The most a host spot check's rows may cost (FLOPS per BATCH row times rows): past it the checked elements are drawn
# from fewer rows, so that a problem whose rows are heavy (an attention head: 4 S^2 D) is checked in seconds.
HOST_CHECK_FLOPS = 2e10


# --- who may run problem code --------------------------------------------------------------------------------
_allowed = threading.local()
_process_allowed = False


def allow_problem_code() -> None:
    """Called once at the start of a process that may import problem files: a device worker, the describe
    subprocess, a sanitizer's launch target. The server never calls it."""
    global _process_allowed
    _process_allowed = True


@contextlib.contextmanager
def problem_code_allowed() -> Iterator[None]:
    """Problem code allowed on this thread for a while: for tests and maintainer tools that play the worker."""
    before = getattr(_allowed, "on", False)
    _allowed.on = True
    try:
        yield
    finally:
        _allowed.on = before


def may_run_problem_code() -> bool:
    return _process_allowed or getattr(_allowed, "on", False)


class ProblemCodeError(PeakError):
    """The problem's own code failed or broke its declaration: the problem file is at fault, not the kernel."""

    kind = "problem_error"

    def __init__(self, message: str, hint: str | None = None, line: int | None = None) -> None:
        super().__init__(message, hint)
        self.line = line  # in the problem file


# --- the declaration -----------------------------------------------------------------------------------------
class BufferDecl(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    shape: tuple[str, ...]
    dtype: str | None = None  # pinned; None: the session's dtype


class ScalarDecl(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    expr: str


class ToleranceDecl(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    factor: float | None = Field(None, gt=0, le=1e6)
    floor: float | None = Field(None, gt=0, le=1e9)
    rel_l2: float | None = Field(None, gt=0, le=1.0)


class ProblemDeclaration(BaseModel):
    """Everything the server knows of a problem file, as data. `lines` maps each declared name (and function)
    to its line in the file, so an error can point there."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    title: str = Field(max_length=200)
    doc: str = Field("", max_length=2000)
    sizes: dict[str, int]
    dtypes: tuple[str, ...]
    inputs: list[BufferDecl]
    outputs: list[BufferDecl]
    scalars: list[ScalarDecl]
    flops: str = "0"
    bytes: str | None = None
    constraints: tuple[str, ...] = ()
    ranges: dict[str, tuple[float, float]] = Field(default_factory=dict)
    # One more validation trial draws these inputs from these ranges instead (e.g. softmax's x in (40, 100)).
    stress_ranges: dict[str, tuple[float, float]] = Field(default_factory=dict)
    tolerance: ToleranceDecl | None = None
    naive: dict[str, str] = Field(default_factory=dict)  # "cuda" or "cuda:f16" -> kernel text
    # A size symbol along which outputs are independent: every output's first axis is it, and an output row needs
    # only the same row of each input whose first axis is it (and the other inputs whole). The host check then
    # computes only the rows it checks. A tuple of symbols: the leading axes, in order (attention's B, H); a row is
    # one index into all of them, and an input is taken row by row where its shape starts with all of them.
    batch: str | tuple[str, ...] | None = None
    # The length of the longest reduction behind one output element (an expression of the sizes), for a tolerance
    # against a reference kernel (kernel_reference.py); None: total input elements over total output elements.
    reduction: str | None = None
    # Size symbols that are parameters (a filter size, a stride, a padding), each with the values generality draws
    # it from instead of awkward extents; such a symbol may be 0 where 0 is one of its values.
    samples: dict[str, tuple[int, ...]] = Field(default_factory=dict)
    # True: the work is a matrix product that f16/bf16 kernels may run on tensor cores (a convolution, attention):
    # their speed floor and % of peak use the tensor-core peak, and an f32 kernel's may be 3xTF32's, as matmul's.
    tensor_cores: bool = False
    # False: no Python reference; its sessions start with the user's kernel (start_session's reference_kernel), and
    # candidates are checked against that kernel (problems/kernel_reference.py).
    has_reference: bool = True
    has_generate: bool = False
    has_error_scale: bool = False
    has_torch_reference: bool = False
    reference_takes_xp: bool = False
    path: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    lines: dict[str, int] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME.fullmatch(value):
            raise ValueError(f"NAME {value!r} must match [a-z][a-z0-9_]{{0,39}}")
        return value

    @field_validator("title")
    @classmethod
    def _title(cls, value: str) -> str:
        if not value.strip() or any(ord(c) < 32 for c in value):
            raise ValueError("TITLE must be one line of text")
        return value.strip()

    @field_validator("title", "doc", mode="before")
    @classmethod
    def _plain_text(cls, value: Any) -> Any:
        """TITLE and the docstring are the file's own text, shown to clients: escape sequences and control
        characters go (newline and tab stay; a TITLE must still be one line), and a text over its limit fails it."""
        from peak_mcp.core.text_safety import clean

        return clean(value, 2000) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _consistent(self) -> ProblemDeclaration:
        def fail(key: str, why: str) -> ValueError:
            return ValueError(f"{key}: {why}")

        if not 1 <= len(self.sizes) <= MAX_SYMBOLS:
            raise fail("SIZES", f"declare 1 to {MAX_SYMBOLS} size symbols")
        for symbol, values in self.samples.items():
            if symbol not in self.sizes:
                raise fail("SAMPLES", f"{symbol!r} is not a size symbol")
            if not 1 <= len(values) <= MAX_SAMPLES or len(set(values)) != len(values) or \
                    any(isinstance(v, bool) or not 0 <= v <= 64 for v in values):
                raise fail("SAMPLES", f"{symbol}: 1 to {MAX_SAMPLES} distinct integers from 0 to 64")
        for symbol, value in self.sizes.items():
            _identifier(symbol, "SIZES", "size symbol")
            least = 0 if 0 in self.samples.get(symbol, ()) else 1
            if isinstance(value, bool) or value < least:
                raise fail("SIZES", f"{symbol}={value!r} must be a positive integer" if least else
                                    f"{symbol}={value!r} must be a non-negative integer")
        if not self.dtypes or len(set(self.dtypes)) != len(self.dtypes) or set(self.dtypes) - set(DTYPE_NAMES):
            raise fail("DTYPES", f"a non-empty list of distinct dtypes among {list(DTYPE_NAMES)}")
        buffers = [*self.inputs, *self.outputs]
        if not self.outputs:
            raise fail("OUTPUTS", "declare at least one output")
        if len(buffers) > MAX_BUFFERS:
            raise fail("INPUTS", f"at most {MAX_BUFFERS} buffers")
        seen: set[str] = set()
        for key, group in (("INPUTS", self.inputs), ("OUTPUTS", self.outputs)):
            for buf in group:
                _identifier(buf.name, key, "buffer name")
                if buf.name in seen or buf.name in self.sizes:
                    raise fail(key, f"buffer {buf.name!r} is declared twice or is also a size symbol")
                seen.add(buf.name)
                if not 1 <= len(buf.shape) <= MAX_RANK:
                    raise fail(key, f"{buf.name}: a shape of 1 to {MAX_RANK} expressions")
                if buf.dtype is not None and buf.dtype not in DTYPE_NAMES:
                    raise fail(key, f"{buf.name}: dtype {buf.dtype!r} is not one of {list(DTYPE_NAMES)}")
                for expr in buf.shape:
                    _expression(expr, self.sizes, f"{key} {buf.name}")
        names = set()
        for scalar in self.scalars:
            _identifier(scalar.name, "SCALARS", "scalar name")
            if scalar.name in seen or scalar.name in names:
                raise fail("SCALARS", f"{scalar.name!r} is declared twice or is also a buffer")
            names.add(scalar.name)
            _expression(scalar.expr, self.sizes, f"SCALARS {scalar.name}")
        _expression(self.flops, self.sizes, "FLOPS")
        if self.bytes is not None:
            _expression(self.bytes, self.sizes, "BYTES")
        for condition in self.constraints:
            try:
                holds = evaluate_condition(condition, self.sizes, where="CONSTRAINTS")
            except AnnotationError as exc:
                raise fail("CONSTRAINTS", exc.message) from None
            if not holds:
                raise fail("CONSTRAINTS", f"the default sizes {self.sizes} break {condition!r}")
        if self.reduction is not None:
            _expression(self.reduction, self.sizes, "REDUCTION")
        if self.batch is not None:
            axes = self.batch_axes
            if not axes or len(set(axes)) != len(axes) or len(axes) > MAX_RANK:
                raise fail("BATCH", f"{self.batch!r}: a size symbol, or a tuple of distinct ones")
            for symbol in axes:
                if symbol not in self.sizes:
                    raise fail("BATCH", f"{symbol!r} is not a size symbol")
            for buf in self.outputs:
                if tuple(buf.shape[:len(axes)]) != axes:
                    raise fail("BATCH", f"output {buf.name}'s leading axes are not {', '.join(axes)}")
        for key, ranges in (("RANGE", self.ranges), ("STRESS_RANGE", self.stress_ranges)):
            for name, (lo, hi) in ranges.items():
                if name not in {b.name for b in self.inputs}:
                    raise fail(key, f"{name!r} is not an input")
                if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi and max(abs(lo), abs(hi)) <= 6e4):
                    raise fail(key, f"{name}: ({lo}, {hi}) is not a finite range with low < high within +-6e4 "
                                    "(f16's range)")
        for key, text in self.naive.items():
            backend, _, dtype = key.partition(":")
            if backend not in BACKEND_NAMES or (dtype and dtype not in self.dtypes):
                raise fail("NAIVE", f"key {key!r}: a backend ({', '.join(BACKEND_NAMES)}), optionally "
                                    "':' and one of the problem's dtypes")
            if not text.strip() or len(text) > MAX_KERNEL_CHARS:
                raise fail("NAIVE", f"{key}: the kernel text is empty or over {MAX_KERNEL_CHARS} characters")
            if KERNEL_CONTROLS.search(text):
                raise fail("NAIVE", f"{key}: the kernel text holds control or invisible format characters")
        for buf in buffers:
            count = math.prod(evaluate(e, self.sizes) for e in buf.shape)
            if count > MAX_ELEMENTS:
                raise fail("SIZES", f"the default sizes {self.sizes} make buffer {buf.name} hold {count:,} "
                                    f"elements, over the limit of {MAX_ELEMENTS:,}")
            if count < 1:
                raise fail("SIZES", f"the default sizes make buffer {buf.name} empty")
        return self

    @property
    def batch_axes(self) -> tuple[str, ...]:
        """BATCH as the tuple of leading axes it names: () without one."""
        return () if self.batch is None else (self.batch,) if isinstance(self.batch, str) else tuple(self.batch)

    def line_of(self, key: str) -> int | None:
        return self.lines.get(key)

    def where(self, key: str | None = None) -> str:
        """`file` or `file:line` for a declared name."""
        line = self.lines.get(key) if key else None
        return f"{self.path}:{line}" if line else self.path


def _identifier(name: str, key: str, what: str) -> None:
    if not IDENTIFIER.fullmatch(name) or keyword.iskeyword(name) or name in RESERVED or name.startswith("__"):
        raise ValueError(f"{key}: {what} {name!r} is not a usable identifier (a C identifier of up to 32 "
                         f"characters, not one of {sorted(RESERVED)})")


def _expression(expr: str, sizes: Mapping[str, int], where: str) -> int:
    try:
        value = evaluate(expr, sizes, where=where)
    except AnnotationError as exc:
        raise ValueError(exc.message) from None
    if value < 0:
        raise ValueError(f"{where}: {expr!r} is negative ({value}) at the default sizes")
    return value


# --- kernel texts: the dtype prelude every naive kernel starts with --------------------------------------------
_CUDA_PRELUDE = {
    "f32": ("", "float", "v", "v"),
    "f16": ("#include <cuda_fp16.h>\n", "__half", "__half2float(v)", "__float2half_rn(v)"),
    "bf16": ("#include <cuda_bf16.h>\n", "__nv_bfloat16", "__bfloat162float(v)", "__float2bfloat16_rn(v)"),
}
_HIP_PRELUDE = {
    "f32": ("", "float"),
    "f16": ("#include <hip/hip_fp16.h>\n", "__half"),
    "bf16": ("#include <hip/hip_bfloat16.h>\n", "hip_bfloat16"),
}
C_TYPE = {"cuda": {"f32": "float", "f16": "__half", "bf16": "__nv_bfloat16"},
          "hip": {"f32": "float", "f16": "__half", "bf16": "hip_bfloat16"},
          "hlsl": {"f32": "float", "f16": "half"}}


def prelude(backend: str, dtype: str) -> str:
    """What a naive kernel's text is preceded by: the storage type `T` of the session's dtype and two
    conversions, `to_f32(T)` and `from_f32(float)` (round to nearest)."""
    head = f"// dtype {dtype}: T is the storage type, to_f32 reads an element, from_f32 rounds a float to T\n"
    if backend == "cuda":
        include, t, load, store = _CUDA_PRELUDE[dtype]
        return (f"{head}{include}typedef {t} T;\n"
                f"__device__ __forceinline__ float to_f32(T v) {{ return {load}; }}\n"
                f"__device__ __forceinline__ T from_f32(float v) {{ return {store}; }}\n")
    if backend == "hip":
        include, t = _HIP_PRELUDE[dtype]
        load, store = ("v", "v") if dtype == "f32" else ("static_cast<float>(v)", "T(v)")
        return (f"{head}#include <hip/hip_runtime.h>\n{include}typedef {t} T;\n"
                f"__device__ __forceinline__ float to_f32(T v) {{ return {load}; }}\n"
                f"__device__ __forceinline__ T from_f32(float v) {{ return {store}; }}\n")
    t = C_TYPE["hlsl"][dtype]
    return (f"{head}typedef {t} T;\n"
            "float to_f32(T v) { return (float)v; }\n"
            "T from_f32(float v) { return (T)v; }\n")


_HIP_NOTE = ("HIP: include <hip/hip_runtime.h> (and <hip/hip_fp16.h> for __half, <hip/hip_bfloat16.h> for "
             "hip_bfloat16); no other headers. The same source targets AMD (64-lane waves) and, through a CUDA "
             "device header, NVIDIA (32-lane warps): use warpSize, not a literal 64, and keep AMD-only builtins "
             "under #if defined(__HIP_PLATFORM_AMD__).")


# --- the problem ---------------------------------------------------------------------------------------------
class DeclaredProblem(Problem):
    """A problem from a declaration. Server-side methods read only the declaration; worker-side ones import the
    problem file (in a worker process only)."""

    def __init__(self, declaration: ProblemDeclaration) -> None:
        d = self.declaration = declaration
        self.name, self.title = d.name, d.title
        self.symbols = tuple(d.sizes)
        self.default_sizes = dict(d.sizes)
        self.dtypes = tuple(d.dtypes)
        # Every backend: one without a naive kernel starts its sessions with no v0 (the agent's first kernel is).
        self.backends = BACKEND_NAMES
        self.naive_backends = tuple(b for b in BACKEND_NAMES if any(k.partition(":")[0] == b for k in d.naive))
        self.source = d.path
        self.yardstick = None
        self.needs_reference_kernel = not d.has_reference
        self.sampled = types.MappingProxyType(dict(d.samples))
        self.derived = types.MappingProxyType({s.name: s.expr for s in d.scalars if s.name not in d.sizes})
        # The file's functions: imported here (describe, a problem host, a shipped file in a worker), or reached
        # through a problem host's link (a worker serving an operator's or a client's file sets it).
        self.code: ProblemCode = LocalCode(declaration)

    def wire(self) -> dict[str, Any]:
        return {"problem": self.name, "declaration": self.declaration}

    # --- server side: data only ------------------------------------------------------------------------------
    def _shape(self, buf: BufferDecl, sizes: Sizes) -> tuple[int, ...]:
        return tuple(evaluate(e, sizes, where=f"{buf.name} shape") for e in buf.shape)

    def arguments(self, dtype: str) -> list[BufferArg | ScalarArg]:
        args: list[BufferArg | ScalarArg] = []
        for buf, is_output in [*((b, False) for b in self.declaration.inputs),
                               *((b, True) for b in self.declaration.outputs)]:
            args.append(BufferArg(buf.name, buf.dtype or dtype, functools.partial(self._shape, buf),
                                  is_output=is_output))
        for scalar in self.declaration.scalars:
            args.append(ScalarArg(scalar.name, functools.partial(_scalar, scalar.expr)))
        return args

    def _extent(self, expr: str) -> str:
        """An extent as the agent reads it: the name of the scalar passed for it (conv2d's P), else the
        expression, parenthesised where it has operators so that `A x B` reads as a product of extents."""
        named = next((name for name, derived in self.derived.items() if derived == expr), None)
        if named:
            return named
        return expr if expr.isidentifier() or expr.isdigit() else f"({expr})"

    def _buffer_words(self, buf: BufferDecl, backend: str, dtype: str, is_output: bool) -> str:
        t = C_TYPE[backend].get(buf.dtype or dtype, "float")
        shape = "×".join(self._extent(e) for e in buf.shape)
        return f"{buf.name} ({t}, {shape}{', read-write' if is_output and backend == 'hlsl' else ''})"

    def abi(self, backend: str, dtype: str) -> str:
        d = self.declaration
        # The docstring's first paragraph, not its first line: a definition wrapped over lines (conv2d's sum
        # over r, s, c of x[...] * w[...]) read as its first line stopped mid-formula.
        first = d.doc.strip().split("\n\n")[0]
        what = " ".join(first.split()) if first else d.title.strip()
        buffers = [(b, False) for b in d.inputs] + [(b, True) for b in d.outputs]
        pinned = [f"{b.name} is always {b.dtype}" for b, _ in buffers if b.dtype]
        semantics = f"{what} Row-major buffers" + (f"; {', '.join(pinned)}" if pinned else "") + "."
        if backend == "hlsl":
            bindings = ", ".join(f"[[vk::binding({i})]] {self._buffer_words(b, backend, dtype, out)}"
                                 for i, (b, out) in enumerate(buffers))
            params = " ".join(f"uint {s.name};" for s in d.scalars)
            lines = [semantics,
                     f"{bindings}: StructuredBuffer/RWStructuredBuffer or ByteAddressBuffer/RWByteAddressBuffer.",
                     f"Sizes in a push-constant block: struct Params {{ {params} }}; "
                     "[[vk::push_constant]] ConstantBuffer<Params> p;" if d.scalars else "No push constants.",
                     "Annotation: // peak: entry=main groups=(gx, gy, gz); the thread-group size is [numthreads].",
                     "Sizes need not be multiples of any tile unless the session says so."]
        else:
            params = [f"{'' if out else 'const '}{C_TYPE[backend].get(b.dtype or dtype, 'float')}* {b.name}"
                      for b, out in buffers] + [f"int {s.name}" for s in d.scalars]
            lines = [semantics, f'extern "C" __global__ void <entry>({", ".join(params)})',
                     "Annotation: // peak: entry=<entry> grid=(gx, gy, gz) block=(bx, by, bz) shared=<dynamic bytes>.",
                     "Buffers are 256-byte aligned; sizes need not be multiples of any tile unless the session says "
                     "so."]
            if backend == "hip":
                lines.append(_HIP_NOTE)
        shapes = "; ".join(f"{b.name}: {' x '.join(self._extent(e) for e in b.shape)}" for b, _ in buffers)
        derived = [f"{name} = {expr}" for name, expr in self.derived.items()
                   if any(expr in b.shape for b, _ in buffers)]
        if derived:  # passed to the kernel, and shorthand in the `peak:` lines for their expressions
            shapes += f" ({'; '.join(derived)}: passed as scalars, and usable in the annotation's expressions)"
        lines.append(f"Shapes: {shapes}. Outputs are poisoned (NaN) before every launch and must be fully written, "
                     "the same bits on every launch; inputs are read-only; nothing may outlive a launch.")
        if d.constraints:
            lines.append(f"The problem holds only at sizes where {' and '.join(d.constraints)}.")
        return "\n".join(lines)

    def check_sizes(self, sizes: Mapping[str, object] | None) -> dict[str, int]:
        checked = super().check_sizes(sizes)
        for condition in self.declaration.constraints:
            if not evaluate_condition(condition, checked, where="the problem's constraint"):
                raise InvalidInput(f"sizes {checked} break {self.name}'s own constraint {condition!r}",
                                   f"choose sizes where {' and '.join(self.declaration.constraints)}.")
        return checked

    def flops(self, sizes: Sizes) -> float:
        return float(evaluate(self.declaration.flops, sizes, where="FLOPS"))

    def min_bytes(self, sizes: Sizes, dtype: str) -> float:
        if self.declaration.bytes is not None:
            return float(evaluate(self.declaration.bytes, sizes, where="BYTES"))
        return float(sum(arg.count(sizes) * itemsize(arg.dtype) for arg in self.arguments(dtype)
                         if isinstance(arg, BufferArg)))

    def peak_path(self, dtype: str, backend: str | None = None) -> str:
        if self.declaration.tensor_cores and dtype in ("f16", "bf16") and backend != "hlsl":
            return {"f16": "fp16_tensor", "bf16": "bf16_tensor"}[dtype]
        return "fp32"  # elementwise and reduction work runs on the f32 cores, whatever the storage type

    def speed_limit(self, dtype: str, peaks: Mapping[str, float]) -> float | None:
        own = peaks.get(self.peak_path(dtype))
        if self.declaration.tensor_cores and dtype == "f32" and own and peaks.get("tf32_tensor"):
            return max(own, peaks["tf32_tensor"] / 3)  # three TF32 products keep f32 accuracy
        return own

    def tolerance(self, dtype: str, sizes: Sizes | None = None) -> Tolerance:
        """Element i of an output within factor * (|lp - ref| + floor * (u_out * m + u_f32 * s)): see references.
        `rel_l2` here is nominal: each reference carries its own bound (or the file's TOLERANCE rel_l2)."""
        given = self.declaration.tolerance or ToleranceDecl()
        return Tolerance(rel_l2=given.rel_l2 or REL_L2_SHARE, roundoff=COMPUTE_ROUNDOFF,
                         factor=given.factor or FACTOR, floor=given.floor or FLOOR, with_lp=True,
                         scale_words="the problem's error scale" if self.declaration.has_error_scale else
                         "√L × max(|ref|, rms(ref)), L the reduction length")

    def has_naive(self, backend: str, dtype: str) -> bool:
        return f"{backend}:{dtype}" in self.declaration.naive or backend in self.declaration.naive

    def naive_kernel(self, backend: str, dtype: str) -> str:
        d = self.declaration
        text = d.naive.get(f"{backend}:{dtype}") or d.naive.get(backend)
        if text is None:
            raise InvalidInput(f"{self.name} has no naive kernel for {backend}",
                               f"{self.name} has naive kernels for {', '.join(self.naive_backends) or 'no backend'}"
                               "; a session elsewhere starts with your first kernel.")
        self.check_dtype(dtype, backend)
        return prelude(backend, dtype) + text

    def generality_sizes(self, sizes: Sizes) -> list[dict[str, int]]:
        """Every symbol 1; below a tile; odd; prime; one past a power of two; one symbol large and the others small
        (each way round, for two or more symbols); near the session's sizes. Sampled symbols (SAMPLES) take their
        values in turn instead. A candidate over SAMPLED_WORK has its largest extents halved (kept odd) until it
        fits, so that a problem of many symbols still gets awkward sizes."""
        extents = tuple(s for s in self.symbols if s not in self.sampled)

        def cycle(values: tuple[int, ...]) -> dict[str, int]:
            return {s: values[i % len(values)] for i, s in enumerate(extents)}

        candidates = [dict.fromkeys(extents, 1), cycle(_BELOW_TILE), cycle(_ODD), cycle(_PRIMES), cycle(_PAST_POW2)]
        for big, value in ((0, 1031), (1, 1029)):
            if big < len(extents):
                small = iter(_SMALL * 3)
                candidates.append({s: value if i == big else next(small) for i, s in enumerate(extents)})
        candidates.append({s: min(sizes[s], 512) + 3 if i % 2 == 0 else max(min(sizes[s], 512) - 1, 2)
                           for i, s in enumerate(extents)})
        # the sizes above have odd rows, where a 16-byte fast path never runs: then the pitched ones, at the session's
        # parameters
        plan = [(c, k, False) for k, c in enumerate(candidates)] + [(c, 0, True) for c in self._pitched(sizes)]
        kept: list[dict[str, int]] = []
        for candidate, k, session_first in plan:
            full = self._within_work(self._with_parameters(candidate, k, sizes, session_first))
            if full is not None and full not in kept:
                kept.append(full)
        return kept

    def _pitch_symbols(self) -> tuple[str, ...]:
        """The size symbols that are some buffer's innermost extent (its row pitch), in declaration order."""
        inner = {b.shape[-1] for b in (*self.declaration.inputs, *self.declaration.outputs) if b.shape}
        return tuple(s for s in self.symbols if s in inner and s not in self.sampled)

    def _pitched(self, sizes: Sizes) -> list[dict[str, int]]:
        """Two candidates whose other extents are small and odd, so that partial tiles meet a fast path: the pitch
        symbols at the session's values where those are multiples of 8 up to 256 (a head dimension, a channel
        count: the session's own fast path), then at multiples of 8 that no 16 divides (tails of a 64-wide slice).
        The sampled symbols keep the session's values."""
        pitch = self._pitch_symbols()
        others = [s for s in self.symbols if s not in pitch and s not in self.sampled]
        ragged = {s: _RAGGED[i % len(_RAGGED)] for i, s in enumerate(others)}
        other = {s: _PITCHED[i % len(_PITCHED)] for i, s in enumerate(pitch)}
        own = {s: sizes[s] if sizes[s] % 8 == 0 and sizes[s] <= 256 else other[s] for s in pitch}
        return [{**own, **ragged}, {**other, **ragged}] if pitch else []

    def _with_parameters(self, extents: dict[str, int], k: int, sizes: Sizes,
                         session_first: bool = False) -> dict[str, int]:
        """The k-th candidate's extents with the sampled symbols' values in turn; where those break the problem's
        constraints, each symbol's first value, then the session's (with session_first: the session's first)."""
        def full(pick: Callable[[int, str, tuple[int, ...]], int]) -> dict[str, int]:
            order = list(self.sampled)
            return {s: extents[s] if s in extents else pick(order.index(s), s, self.sampled[s]) for s in self.symbols}

        tries = [full(lambda j, s, values: values[(k + j) % len(values)]),
                 full(lambda j, s, values: values[0]), full(lambda j, s, values: sizes[s])]
        if session_first:
            tries.insert(0, tries.pop())
        for candidate in tries if self.sampled else tries[:1]:
            try:
                if self.check_sizes(candidate) == candidate:
                    return candidate
            except PeakError:
                continue
        return tries[0]

    def _within_work(self, candidate: dict[str, int]) -> dict[str, int] | None:
        candidate = dict(candidate)
        extents = [s for s in self.symbols if s not in self.sampled]
        pitch = set(self._pitch_symbols())
        while self.work(candidate) > SAMPLED_WORK:
            largest = max(extents, key=lambda s: candidate[s], default=None)
            if largest is None or candidate[largest] <= 1:
                return None
            value = candidate[largest]
            # a row pitch of whole 16-byte chunks stays one (down to 8); other extents stay odd
            candidate[largest] = max(8, value // 16 * 8) if largest in pitch and value % 8 == 0 and value > 8 \
                else max(1, (value // 2) | 1)
        return candidate

    # --- worker side: the problem file's code ------------------------------------------------------------------
    def _call(self, function: str, *args: Any, **kwargs: Any) -> Any:
        """A function of the problem file; any exception is a ProblemCodeError naming the file and line."""
        return self.code.call(function, *args, **kwargs)

    def _keywords(self, function: str, sizes: Sizes, xp: Any | None = None,
                  dtype: str | None = None) -> dict[str, Any]:
        """The size keywords (and `xp`, and the session's `dtype`) a problem function takes."""
        found = self.code.parameters(function)
        if found is None:
            return dict(sizes)
        params, takes_all = found
        chosen = {k: v for k, v in sizes.items() if takes_all or k in params}
        if xp is not None and ("xp" in params or takes_all):
            chosen["xp"] = xp
        if dtype is not None and ("dtype" in params or takes_all):
            chosen["dtype"] = dtype
        return chosen

    def _bad(self, function: str, why: str) -> ProblemCodeError:
        return ProblemCodeError(f"the problem's own code is wrong, not the kernel: {function}() at "
                                f"{self.declaration.where(function)} {why}",
                                fix_hint(self.declaration.path), self.declaration.line_of(function))

    def make_inputs(self, sizes: Sizes, dtype: str, seed: int, xp: Any) -> dict[str, Any]:
        return self._draw(sizes, dtype, seed, xp, self.declaration.ranges)

    def stress_ranges(self) -> str:
        return ", ".join(f"{name} in ({lo:g}, {hi:g})" for name, (lo, hi) in self.declaration.stress_ranges.items())

    def stress_inputs(self, sizes: Sizes, dtype: str, seed: int, xp: Any) -> dict[str, Any] | None:
        """Inputs with the file's STRESS_RANGE in place of RANGE (None without one): a trial that a kernel which
        is only right for small values fails (a softmax without the max subtraction overflows its exp)."""
        if not self.declaration.stress_ranges:
            return None
        return self._draw(sizes, dtype, seed, xp, {**self.declaration.ranges, **self.declaration.stress_ranges},
                          generate=False)

    def _draw(self, sizes: Sizes, dtype: str, seed: int, xp: Any, ranges: Mapping[str, tuple[float, float]],
              generate: bool = True) -> dict[str, Any]:
        if isinstance(self.code, LocalCode):
            self.code.module()  # worker-side, whether or not the file generates its inputs: refused elsewhere
        inputs: dict[str, Any] = {}
        for i, buf in enumerate(self.declaration.inputs):
            shape = self._shape(buf, sizes)
            count = math.prod(shape)
            stored_dtype = buf.dtype or dtype
            if self.declaration.has_generate and (generate or buf.name not in ranges):
                values = self.code.generate(buf.name, shape, [seed, i])
                values = self._checked_array("generate", values, shape, f"input {buf.name}", np)
                stored = xp.asarray(from_float(values.astype(np.float32).reshape(-1), stored_dtype))
            else:
                lo, hi = ranges.get(buf.name, (-1.0, 1.0))
                values = (uniform(xp, seed * 64 + i, count) * (hi - lo) + lo).astype(np.float32)
                stored = from_float(values, stored_dtype)
                zero = to_float64(stored, stored_dtype) == 0  # never zeros (also after rounding to 16 bits)
                if bool(zero.any()):
                    fill = hi / 2 if hi != 0 else lo / 2
                    stored[zero] = from_float(xp.asarray([fill], np.float32), stored_dtype)[0]
            inputs[buf.name] = stored
        return inputs

    def _checked_array(self, function: str, value: Any, shape: tuple[int, ...], what: str, xp: Any) -> Any:
        """`value` as a float64 array of `shape` (numpy or cupy), or a ProblemCodeError that says what is wrong."""
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = xp.full(shape, float(value))
        if not hasattr(value, "shape") or not hasattr(value, "dtype"):
            raise self._bad(function, f"returned {type(value).__name__} for {what}, not an array")
        if value.dtype.kind not in "fiu":
            raise self._bad(function, f"returned dtype {value.dtype} for {what}: a real-valued array is needed")
        if tuple(value.shape) != tuple(shape):
            if math.prod(value.shape) == math.prod(shape) and len(value.shape) == 1:
                value = value.reshape(shape)
            else:
                raise self._bad(function, f"returned shape {tuple(value.shape)} for {what}; the declaration says "
                                          f"{tuple(shape)}")
        value = value.astype(np.float64)
        if not bool(xp.isfinite(value).all()):
            raise self._bad(function, f"returned NaN or Inf in {what}")
        return value

    def _outputs(self, function: str, result: Any, sizes: Sizes, xp: Any) -> dict[str, Any]:
        """A reference's (or error scale's) result as {output name: float64 array of its shape}."""
        names = [b.name for b in self.declaration.outputs]
        if isinstance(result, Mapping):
            missing = [n for n in names if n not in result]
            if missing:
                raise self._bad(function, f"returned no {missing} (a dict by output name is expected)")
            values = [result[n] for n in names]
        elif isinstance(result, tuple | list) and not hasattr(result, "shape"):
            if len(result) != len(names):
                raise self._bad(function, f"returned {len(result)} values for {len(names)} outputs {names}")
            values = list(result)
        else:
            if len(names) != 1:
                raise self._bad(function, f"returned one array for {len(names)} outputs {names}")
            values = [result]
        return {buf.name: self._checked_array(function, v, self._shape(buf, sizes), f"output {buf.name}", xp)
                for buf, v in zip(self.declaration.outputs, values, strict=True)}

    def _reference_values(self, inputs: Mapping[str, Any], sizes: Sizes, dtype: str, xp: Any,
                          precision: Any) -> dict[str, Any]:
        """The reference function on the stored inputs converted to `precision` (float64: the reference; float32:
        lp), computed with xp where the function takes it, else on the host."""
        if not self.declaration.has_reference:
            raise ProblemCodeError(f"{self.declaration.path} defines no reference function",
                                   "its sessions are checked against the kernel given as start_session's "
                                   "reference_kernel")
        host = not self.declaration.reference_takes_xp and xp is not np
        mod = np if host else xp
        args = []
        for buf in self.declaration.inputs:
            value = to_float64(inputs[buf.name], buf.dtype or dtype).reshape(self._shape(buf, sizes))
            if host:
                value = xp.asnumpy(value)
            args.append(value.astype(precision))
        keywords = self._keywords("reference", sizes, mod if self.declaration.reference_takes_xp else None)
        result = self._call("reference", *args, **keywords)
        outputs = self._outputs("reference", result, sizes, mod)
        return {k: xp.asarray(v) for k, v in outputs.items()} if host else outputs

    def _error_scale(self, inputs: Mapping[str, Any], sizes: Sizes, dtype: str, xp: Any) -> dict[str, Any]:
        """The file's error_scale: on the host (numpy), or where it takes `xp` with xp beside the reference (an
        error scale as costly as the reference itself, attention's); `dtype` (the session's) where it takes it."""
        keywords = self._keywords("error_scale", sizes, None, dtype)
        found = self.code.parameters("error_scale")
        if found is not None and "xp" in found[0]:
            keywords["xp"] = xp
        mod = xp if "xp" in keywords else np
        args = [v if mod is xp else xp.asnumpy(v) if xp is not np else v for v in
                (to_float64(inputs[b.name], b.dtype or dtype).reshape(self._shape(b, sizes))
                 for b in self.declaration.inputs)]
        result = self._call("error_scale", *args, **keywords)
        scales = self._outputs("error_scale", result, sizes, mod)
        return {k: xp.abs(xp.asarray(v)) for k, v in scales.items()}

    def references(self, inputs: Mapping[str, Any], sizes: Sizes, dtype: str, xp: Any) -> dict[str, Reference]:
        """Every output's reference and bound. The bound of element i is

            factor * (|lp_i - ref_i| + floor * (u_out * m_i + u_f32 * s_i))

        ref: the reference in float64; lp: the same reference fed the stored inputs in float32 and rounded to the
        output's dtype (what a straightforward correct kernel computes); m = max(|ref|, rms(ref)) (rounding the
        output: u_out is its dtype's unit roundoff); s: the problem's error scale, m by default (computing in f32).
        It is folded into Reference.scale over the tolerance's factor * floor * u_f32. The relative L2 error, taken
        against ||m||, must stay under REL_L2_SHARE of the bounds' norm (or the file's TOLERANCE rel_l2)."""
        tol = self.tolerance(dtype)
        exact = self._reference_values(inputs, sizes, dtype, xp, np.float64)
        rough = self._reference_values(inputs, sizes, dtype, xp, np.float32)
        scales = self._error_scale(inputs, sizes, dtype, xp) if self.declaration.has_error_scale else None
        refs = {}
        for buf in self.declaration.outputs:
            out_dtype = buf.dtype or dtype
            ref = exact[buf.name].reshape(-1)
            lp = to_float64(from_float(rough[buf.name].reshape(-1).astype(np.float32), out_dtype), out_dtype)
            magnitude = magnitude_of(ref, xp)
            scale = scales[buf.name].reshape(-1) if scales is not None else \
                math.sqrt(self.reduction_length(sizes)) * magnitude
            refs[buf.name] = self.bounded(ref, magnitude, scale, xp.abs(lp - ref), out_dtype, tol, xp)
        return refs

    def bounded(self, ref: Any, magnitude: Any, scale: Any, deviation: Any, out_dtype: str, tol: Tolerance,
                xp: Any) -> Reference:
        """`ref` with the bound factor * (deviation + floor * (u_out * m + u_f32 * s)) folded into its scale (over
        the tolerance's factor * floor * u_f32), and its relative L2 bound: REL_L2_SHARE of the bounds' norm against
        ||m||, or the file's TOLERANCE rel_l2. `deviation`: |lp - ref| for a Python reference, a kernel's
        run-to-run spread for a kernel one."""
        folded = (scale + magnitude * (UNIT_ROUNDOFF[out_dtype] / COMPUTE_ROUNDOFF)
                  + deviation / (tol.floor * COMPUTE_ROUNDOFF))
        norm = float(xp.linalg.norm(magnitude)) or 1.0
        given = self.declaration.tolerance
        rel_l2 = given.rel_l2 if given and given.rel_l2 else \
            REL_L2_SHARE * tol.elementwise * float(xp.linalg.norm(folded)) / norm
        return Reference(ref, None, folded, norm=norm, rel_l2=rel_l2)

    def reference(self, inputs: Mapping[str, Any], sizes: Sizes, dtype: str, seed: int, max_flops: float,
                  xp: Any) -> dict[str, Reference]:
        return self.references(inputs, sizes, dtype, xp)

    def reduction_length(self, sizes: Sizes) -> int:
        """The length of the longest reduction behind one output element, whose rounding error in an order other
        than the reference's grows with its square root: REDUCTION where declared; else, with BATCH, the elements of
        one batch row of the largest input (a row-wise op reduces along its row); else input elements over output
        elements (a sum of each row: its length; an elementwise op: 1)."""
        d = self.declaration
        if d.reduction is not None:
            return max(1, evaluate(d.reduction, sizes))
        size = lambda buf: math.prod(evaluate(e, sizes) for e in buf.shape)  # noqa: E731
        axes = d.batch_axes
        if axes:
            rows = [size(b) // max(1, self._rows(sizes)) for b in d.inputs if tuple(b.shape[:len(axes)]) == axes]
            if rows:
                return max(1, max(rows))
        return max(1, sum(map(size, d.inputs)) // max(1, sum(map(size, d.outputs))))

    def _rows(self, sizes: Sizes) -> int:
        """How many BATCH rows an output has: the product of the BATCH axes."""
        return math.prod(sizes[a] for a in self.declaration.batch_axes)

    def host_picks(self, picks: np.ndarray, sizes: Sizes) -> np.ndarray:
        """`picks` (flat indices into the first output) moved into at most as many BATCH rows as the host may
        recompute within HOST_CHECK_FLOPS: the rows of the first picks, in the order drawn, are kept and every
        other pick moves to one of them at the same place within its row. Without BATCH, or when the rows are
        cheap, `picks` unchanged."""
        axes = self.declaration.batch_axes
        rows_total = self._rows(sizes) if axes else 0
        if not rows_total or self.flops(sizes) <= 0:
            return picks
        keep = max(1, int(HOST_CHECK_FLOPS // (self.flops(sizes) / rows_total)))
        per_row = math.prod(evaluate(e, sizes) for e in self.declaration.outputs[0].shape[len(axes):])
        rows, within = np.asarray(picks) // per_row, np.asarray(picks) % per_row
        first = list(dict.fromkeys(rows.tolist()))
        if len(first) <= keep:
            return picks
        kept = np.asarray(first[:keep], np.int64)
        moved = kept[np.searchsorted(np.asarray(sorted(first)), rows) % keep]
        return np.unique(moved * per_row + within)

    def reference_at(self, inputs: Mapping[str, Any], sizes: Sizes, dtype: str, indices: np.ndarray,
                     to_host: Any) -> tuple[np.ndarray, np.ndarray]:
        """The first output at flat `indices`, on the host: of only the rows they fall in where the file declares
        BATCH (rows are independent; with several BATCH axes the rows go to the reference along the first, the
        others 1), else of the whole output."""
        axes = self.declaration.batch_axes
        if not axes:
            host = {name: to_host(value) for name, value in inputs.items()}
            ref = next(iter(self.references(host, sizes, dtype, np).values()))
            return ref.values[indices], ref.scale[indices]
        first = self.declaration.outputs[0]
        per_row = math.prod(evaluate(e, sizes) for e in first.shape[len(axes):])
        rows, where_in = np.unique(np.asarray(indices) // per_row, return_inverse=True)
        picked = {**sizes, **dict.fromkeys(axes, 1), axes[0]: int(rows.size)}
        host = {}
        for buf in self.declaration.inputs:
            value = inputs[buf.name]
            if tuple(buf.shape[:len(axes)]) == axes:
                rest = math.prod(evaluate(e, sizes) for e in buf.shape[len(axes):])
                value = value.reshape(self._rows(sizes), rest)[rows.tolist() if hasattr(value, "get") else rows]
            host[buf.name] = to_host(value).reshape(-1)
        ref = next(iter(self.references(host, picked, dtype, np).values()))
        at = where_in * per_row + np.asarray(indices) % per_row
        return ref.values[at], ref.scale[at]

    def torch_reference(self) -> Callable[..., Any] | None:
        """The problem file's torch_reference (worker side), for the torch yardsticks; None when it has none or
        runs elsewhere (a problem host times it: `self.code.torch_timings`)."""
        if not self.declaration.has_torch_reference or not isinstance(self.code, LocalCode):
            return None
        return self.code.torch_reference()

    def torch_keywords(self, sizes: Sizes) -> dict[str, Any]:
        """The size keywords torch_reference takes (worker side)."""
        return self._keywords("torch_reference", sizes)


def magnitude_of(ref: Any, xp: Any) -> Any:
    """m = max(|ref|, rms(ref)) per element: the magnitude every bound is relative to."""
    rms = float(xp.sqrt(xp.mean(ref * ref))) if ref.size else 0.0
    return xp.maximum(xp.abs(ref), rms or 1.0)


def _scalar(expr: str, sizes: Sizes) -> int:
    return evaluate(expr, sizes, where="SCALARS")



# --- loading a problem file in a worker ------------------------------------------------------------------------
_modules: dict[tuple[str, str], types.ModuleType] = {}
_loading = threading.Lock()


def load_module(declaration: ProblemDeclaration) -> types.ModuleType:
    """The problem file's module, executed from the bytes whose sha256 the declaration names; refused outside a
    process that may run problem code."""
    if not may_run_problem_code():
        raise PeakError(f"refusing to import the problem file {declaration.path} in this process: problem code "
                        "runs only in worker processes", "this is a bug in peak-mcp; please report it.")
    key = (declaration.path, declaration.sha256)
    with _loading:
        if key in _modules:
            return _modules[key]
        module = problem_module(execute_file(Path(declaration.path), declaration.sha256), declaration.name)
        _modules[key] = module
        return module


def problem_module(module: types.ModuleType, name: str) -> types.ModuleType:
    """A problem file's module as the declaration reads it: itself, or for a KernelBench file (class Model,
    get_inputs) a module holding its translation (peak_mcp.problems.kernelbench: the upper-case names, reference,
    generate, torch_reference) under the problem's `name`."""
    from peak_mcp.problems import kernelbench

    if not kernelbench.looks_like_kernelbench(vars(module)):
        return module
    translated = kernelbench.declare_kernelbench(module, name)
    wrapper = types.ModuleType(module.__name__ + "_kernelbench", module.__doc__)
    wrapper.__file__ = module.__file__
    vars(wrapper).update(translated.namespace())
    wrapper.KERNELBENCH = translated  # type: ignore[attr-defined]  # symbols, constants, notes
    return wrapper


def execute_file(path: Path, sha256: str | None = None) -> types.ModuleType:
    """Run a problem file as a module (not registered in sys.modules under its own name, so two files never share
    one). `sha256`: the file must still hold exactly those bytes."""
    if not may_run_problem_code():
        raise PeakError(f"refusing to run the problem file {path} in this process", None)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ProblemCodeError(f"cannot read the problem file {path}: {exc.strerror}",
                               "the worker reads problem files where the server found them.") from None
    digest = hashlib.sha256(data).hexdigest()
    if sha256 is not None and digest != sha256:
        raise ProblemCodeError(f"the problem file {path} changed since the server read it",
                               "call list_problems (the server reads it again) and start a new session.")
    module = types.ModuleType(f"peak_problem_{digest[:16]}")
    module.__file__ = str(path)
    code = compile(data, str(path), "exec", dont_inherit=True)
    sys.modules[module.__name__] = module  # dataclasses and pickling look their module up there
    try:
        exec(code, module.__dict__)
    except BaseException:
        sys.modules.pop(module.__name__, None)
        raise
    return module
