"""`DeclaredProblem`: the problem built from a problem file's declaration (problems/declaration.py).

The server reads a declaration and never the file's Python. The worker-side methods (`make_inputs`, `reference`,
`reference_at`) import the file (problems/loading.py), after checking its sha256 against the declaration's, and
only in a process that said it is a worker (`allow_problem_code`): anywhere else they refuse. docs/problems.md
describes the format.
"""

from __future__ import annotations

import functools
import math
import types
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from peak_mcp.core.dtypes import from_float, itemsize, to_float64, uniform
from peak_mcp.core.errors import InvalidInput, PeakError
from peak_mcp.core.launch import evaluate, evaluate_condition
from peak_mcp.problems.base import BufferArg, Problem, Reference, ScalarArg, Sizes, Tolerance
from peak_mcp.problems.code import LocalCode, ProblemCode, fix_hint
from peak_mcp.problems.declaration import BACKEND_NAMES, UNIT_ROUNDOFF, BufferDecl, ProblemDeclaration, ToleranceDecl
from peak_mcp.problems.loading import ProblemCodeError

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
