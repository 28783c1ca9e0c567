"""A problem file's declaration as data (`ProblemDeclaration`): sizes, buffers, expressions, kernel texts, read by a
confined subprocess (`peak_mcp.problems.describe`) and validated here like any other untrusted JSON.
docs/problems.md describes the format."""

from __future__ import annotations

import keyword
import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from peak_mcp.core.dtypes import EXACT_DTYPES, EXACT_LIMITS, FLOAT_DTYPES
from peak_mcp.core.errors import AnnotationError
from peak_mcp.core.expressions import FUNCTIONS, SM_COUNT, evaluate, evaluate_condition
from peak_mcp.problems.traits import TRAITS, unknown

BACKEND_NAMES = ("cuda", "hip", "hlsl")
# What a kernel text may not hold (every other client reads a naive kernel as its v0): controls but tab, newline and
# carriage return, and the invisible format characters text_safety.clean drops.
KERNEL_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u180e\u200b-\u200f\u2028-\u202e"
                             "\u2060-\u2069\ufeff\U000e0000-\U000e007f]")
DTYPE_NAMES = FLOAT_DTYPES
# What an exact input without int_range draws from, [low, high): small values that still exercise the type.
EXACT_DEFAULT_RANGE = {"int32": (-1000, 1000), "int64": (-1000, 1000), "uint8": (0, 256), "int8": (-128, 128),
                       "bool": (0, 2)}
TENSOR_PEAK = {"f16": "fp16_tensor", "bf16": "bf16_tensor"}  # TENSOR_CORES problems' speed limit per dtype
UNIT_ROUNDOFF = {"f32": 2.0**-24, "f16": 2.0**-11, "bf16": 2.0**-8}
MAX_SYMBOLS, MAX_RANK = 12, 6  # rank: KernelBench has 5-D tensors (3-D convolution, pooling)
# A network's parameters are inputs: KernelBench level 3's largest, ResNet101, has 316 buffers (314 parameters). 400
# pointers and 12 ints (3,248 bytes) stay within the 4 KB of kernel parameters of HIP and of CUDA before 12.1; the
# limit also bounds the ABI's text and a launch's argument list.
MAX_BUFFERS = 400
MAX_SAMPLES = 8  # values per sampled symbol
MAX_KERNEL_CHARS = 256 * 1024
MAX_DEFINITION_CHARS = 8000
MAX_ELEMENTS = 1 << 31  # per buffer, as for every problem
# A problem's NAME is shown whole in every answer (an agent passes it back to start_session); KernelBench file stems
# name problems, and many ran past the former 40 characters (they were cut, silently).
MAX_NAME_CHARS = 100
NAME = re.compile(rf"[a-z][a-z0-9_]{{0,{MAX_NAME_CHARS - 1}}}")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")
# Names the ABI or grammar uses. SM_COUNT: the device's multiprocessor count in launch expressions, which a size
# symbol of that name silently lost to (and a scalar of that name would hide).
RESERVED = frozenset({*FUNCTIONS, SM_COUNT, "p", "T", "xp", "dtype", "to_f32", "from_f32", "main"})


# --- the declaration -----------------------------------------------------------------------------------------
class BufferDecl(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    shape: tuple[str, ...]
    dtype: str | None = None  # pinned (a float dtype, or an exact one: EXACT_DTYPES); None: the session's dtype
    # An exact input's values are drawn uniformly from [low, high), two expressions of the sizes (class targets:
    # ("0", "C")); None: the type's default (EXACT_DEFAULT_RANGE). Only for exact dtypes other than bool.
    int_range: tuple[str, str] | None = None

    @property
    def exact(self) -> bool:
        return self.dtype in EXACT_DTYPES


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
    # What the problem computes, as an agent must read it to write a kernel over MCP alone: a problem file's
    # reference source; a KernelBench file's model as built and its forward's source (kernelbench/definition.py).
    definition: str = Field("", max_length=MAX_DEFINITION_CHARS)
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
    # What kind of computation it is (TRAITS; a KernelBench translation records it from the ops its forward runs);
    # empty: DeclaredProblem derives it from the rest of the declaration (problems/traits.py).
    traits: tuple[str, ...] = ()
    # Without TRAITS: what the reference's behaviour showed when describe probed it (problems/trait_probe.py); the
    # shapes' guess where empty.
    probed_traits: tuple[str, ...] = ()
    # False: no Python reference; its sessions start with the user's kernel (start_session's reference_kernel), and
    # candidates are checked against that kernel (problems/kernel_reference.py).
    has_reference: bool = True
    has_generate: bool = False
    has_error_scale: bool = False
    has_torch_reference: bool = False
    reference_takes_xp: bool = False
    # The reference computes in float64 whatever precision its inputs come in (REFERENCE_IN_FLOAT64; a KernelBench
    # translation widens them): its float32 run would equal the float64 one, so it is not made, and lp is the
    # float64 reference rounded to the output's dtype. The bound is then no wider than with a float32 run.
    reference_in_float64: bool = False
    path: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    lines: dict[str, int] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME.fullmatch(value):
            raise ValueError(f"NAME {value!r} must match {NAME.pattern}")
        return value

    @field_validator("title")
    @classmethod
    def _title(cls, value: str) -> str:
        if not value.strip() or any(ord(c) < 32 for c in value):
            raise ValueError("TITLE must be one line of text")
        return value.strip()

    @field_validator("definition", mode="before")
    @classmethod
    def _plain_definition(cls, value: Any) -> Any:
        """The file's own source, shown to clients as the doc is: cleaned, and bounded."""
        from peak_mcp.core.text_safety import clean

        return clean(value, MAX_DEFINITION_CHARS) if isinstance(value, str) else value

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

        if len(self.sizes) > MAX_SYMBOLS:  # none: every shape fixed (a KernelBench file at its own sizes)
            raise fail("SIZES", f"declare at most {MAX_SYMBOLS} size symbols")
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
                if len(buf.shape) > MAX_RANK:  # () is one value: a loss, a total
                    raise fail(key, f"{buf.name}: a shape of at most {MAX_RANK} expressions (() for one value)")
                if buf.dtype is not None and buf.dtype not in (*DTYPE_NAMES, *EXACT_DTYPES):
                    raise fail(key, f"{buf.name}: dtype {buf.dtype!r} is not one of "
                                    f"{[*DTYPE_NAMES, *EXACT_DTYPES]}")
                for expr in buf.shape:
                    _expression(expr, self.sizes, f"{key} {buf.name}")
                if buf.int_range is not None:
                    _int_range(buf, self.sizes, key, key == "OUTPUTS")
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
        if unknown(self.traits):
            raise fail("TRAITS", f"unknown trait(s) {unknown(self.traits)}; the vocabulary: {list(TRAITS)}")
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
                if any(b.name == name and b.exact for b in self.inputs):
                    raise fail(key, f"{name!r} is an integer or bool input: its range is the third item of its "
                                    "INPUTS entry, (dtype, shape, (low, high))")
                if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi and max(abs(lo), abs(hi)) <= 6e4):
                    raise fail(key, f"{name}: ({lo}, {hi}) is not a finite range with low < high within +-6e4 "
                                    "(f16's range)")
        if not self.has_reference and any(b.exact for b in buffers):
            raise fail("INPUTS", "integer and bool buffers need a reference function (a reference kernel's bound "
                                 "is for floating-point outputs)")
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


def int_range_at(buf: BufferDecl, sizes: Mapping[str, int]) -> tuple[int, int]:
    """[low, high) an exact input draws from at `sizes`."""
    if buf.int_range is None:
        return EXACT_DEFAULT_RANGE[buf.dtype or "int32"]
    low, high = (evaluate(e, sizes, where=f"{buf.name} range") for e in buf.int_range)
    return low, high


def _int_range(buf: BufferDecl, sizes: Mapping[str, int], key: str, is_output: bool) -> None:
    if is_output or buf.dtype not in EXACT_DTYPES or buf.dtype == "bool":
        raise ValueError(f"{key}: {buf.name}: a range is given only for an integer input (int32, int64, uint8, "
                         "int8)")
    try:
        low, high = int_range_at(buf, sizes)
    except AnnotationError as exc:
        raise ValueError(exc.message) from None
    least, most = EXACT_LIMITS[buf.dtype]
    if not least <= low < high <= most:
        raise ValueError(f"{key}: {buf.name}: range [{low}, {high}) at the default sizes is empty or outside "
                         f"{buf.dtype}'s [{least}, {most})")


def _expression(expr: str, sizes: Mapping[str, int], where: str) -> int:
    try:
        value = evaluate(expr, sizes, where=where)
    except AnnotationError as exc:
        raise ValueError(exc.message) from None
    if value < 0:
        raise ValueError(f"{where}: {expr!r} is negative ({value}) at the default sizes")
    return value
