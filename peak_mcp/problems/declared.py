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

from peak_mcp.core.dtypes import EXACT_C_TYPES, itemsize
from peak_mcp.core.errors import AnnotationError, InvalidInput, PeakError
from peak_mcp.core.expressions import evaluate, evaluate_condition
from peak_mcp.problems.base import SAMPLED_WORK, BufferArg, Problem, ScalarArg, Sizes, Tolerance
from peak_mcp.problems.code import LocalCode, ProblemCode
from peak_mcp.problems.declaration import BACKEND_NAMES, BufferDecl, ProblemDeclaration, ToleranceDecl, int_range_at
from peak_mcp.problems.file_calls import COMPUTE_ROUNDOFF, FACTOR, FLOOR, REL_L2_SHARE, ROW_TRAITS, FileCalls
from peak_mcp.problems.row_shape import row_shape, row_suggestion
from peak_mcp.problems.traits import declared_traits

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
C_TYPE = {"cuda": {"f32": "float", "f16": "__half", "bf16": "__nv_bfloat16", **EXACT_C_TYPES},
          "hip": {"f32": "float", "f16": "__half", "bf16": "hip_bfloat16", **EXACT_C_TYPES},
          # HLSL has no 8-bit scalars in buffers, and glslang no 64-bit integers: 8-bit types are read as packed
          # words, int64 as uint2 (low, high 32 bits), which every compiler and device here takes.
          "hlsl": {"f32": "float", "f16": "half", "int32": "int", "int64": "uint2", "uint8": "uint",
                   "int8": "uint", "bool": "uint"}}
_HLSL_EXACT_NOTE = {
    "int64": "int64 elements as uint2: x the low 32 bits, y the high 32 bits (two's complement; glslang's HLSL has "
             "no 64-bit integer type)",
    "8-bit": "8-bit elements (bool, uint8, int8) packed 4 to a uint, little-endian: element i is "
             "(buf[i / 4] >> (8 * (i % 4))) & 0xFF; an 8-bit output's words hold other elements and, in the last "
             "word, bytes past the end that must stay as they are: write a byte with InterlockedAnd/InterlockedOr "
             "on its word (or a whole word where one thread owns its 4 elements inside the buffer)",
}


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
# Buffer names an HLSL source cannot declare (parameter modifiers and types a KernelBench name may take).
HLSL_KEYWORDS = frozenset({"out", "in", "inout", "uniform", "point", "line", "triangle", "vector", "matrix",
                           "sample", "precise", "shared", "groupshared", "register", "packoffset", "linear",
                           "centroid", "nointerpolation", "noperspective", "string", "texture", "sampler", "buffer"})


class DeclaredProblem(FileCalls, Problem):
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
        self.definition = d.definition
        self.yardstick = None
        self.needs_reference_kernel = not d.has_reference
        self.sampled = types.MappingProxyType(dict(d.samples))
        self.derived = types.MappingProxyType({s.name: s.expr for s in d.scalars if s.name not in d.sizes})
        self.traits = declared_traits(d.traits, d.tensor_cores, d.reduction, [b.shape for b in d.inputs],
                                      [b.shape for b in d.outputs], probed=d.probed_traits)
        # The file's functions: imported here (describe, a problem host, a shipped file in a worker), or reached
        # through a problem host's link (a worker serving an operator's or a client's file sets it).
        self.code: ProblemCode = LocalCode(declaration)

    def wire(self) -> dict[str, Any]:
        return {"problem": self.name, "declaration": self.declaration}

    def suggestion_score(self, tags: tuple[str, ...] | list[str], sizes: Sizes,
                         units: int | None) -> tuple[float, list[str]]:
        """Row texts ranked by the session's rows: how many, how long (problems/row_shape.py)."""
        if not set(self.traits) & ROW_TRAITS:
            return 0.0, []
        return row_suggestion(tags, row_shape(self.declaration, dict(sizes)), units)

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
        if backend == "hlsl" and buf.exact and buf.dtype != "int32":
            t = f"{buf.dtype} as {'uint2' if buf.dtype == 'int64' else 'packed uint words'}"
        elif buf.exact:
            t = f"{buf.dtype}: {t}" if t != buf.dtype else t
        shape = "×".join(self._extent(e) for e in buf.shape) or "one value"
        return f"{buf.name} ({t}, {shape}{', read-write' if is_output and backend == 'hlsl' else ''})"

    def _exact_words(self, buffers: list[tuple[BufferDecl, bool]], backend: str) -> str:
        """The integer and bool buffers in words: their own storage types, what inputs hold, how outputs are
        compared, and on HLSL how the types are laid out."""
        if not any(b.exact for b, _ in buffers):
            return ""
        parts = []
        for b, out in buffers:
            if not b.exact:
                continue
            if out:
                parts.append(f"{b.name} is {b.dtype}, compared exactly")
            elif b.dtype == "bool":
                parts.append(f"{b.name} is bool (one byte, 0 or 1)")
            else:
                low, high = b.int_range or (str(v) for v in int_range_at(b, self.default_sizes))
                parts.append(f"{b.name} is {b.dtype}, values in [{low}, {high})")
        text = ("Own storage types, whatever the session's dtype: " + "; ".join(parts) + ". An integer or bool "
                "output must equal the reference in every element; where equal inputs allow several answers, the "
                "reference's rule picks the one asked for (an argmax: the first maximal index)."
                if any(out for b, out in buffers if b.exact) else
                "Own storage types, whatever the session's dtype: " + "; ".join(parts) + ".")
        if backend == "hlsl":
            notes = [_HLSL_EXACT_NOTE[k] for k, types in (("int64", ("int64",)), ("8-bit", ("bool", "uint8", "int8")))
                     if any(b.dtype in types for b, _ in buffers)]
            text += "".join(f" HLSL: {n}." for n in notes)
        return text

    def abi(self, backend: str, dtype: str) -> str:
        d = self.declaration
        # The docstring's first paragraph, not its first line: a definition wrapped over lines (conv2d's sum
        # over r, s, c of x[...] * w[...]) read as its first line stopped mid-formula.
        first = d.doc.strip().split("\n\n")[0]
        what = " ".join(first.split()) if first else d.title.strip()
        buffers = [(b, False) for b in d.inputs] + [(b, True) for b in d.outputs]
        pinned = [f"{b.name} is always {b.dtype}" for b, _ in buffers if b.dtype and not b.exact]
        semantics = f"{what} Row-major buffers" + (f"; {', '.join(pinned)}" if pinned else "") + "."
        exact = self._exact_words(buffers, backend)
        if exact:
            semantics += " " + exact
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
            reserved = [b.name for b, _ in buffers if b.name in HLSL_KEYWORDS]
            if reserved:  # KernelBench names every output `out`: declared as such, glslang says only "Expected"
                said = "is an HLSL keyword" if len(reserved) == 1 else "are HLSL keywords"
                lines.append(f"{', '.join(reserved)} {said}: give the binding another name (bindings go by number).")
        else:
            params = [f"{'' if out else 'const '}{C_TYPE[backend].get(b.dtype or dtype, 'float')}* {b.name}"
                      for b, out in buffers] + [f"int {s.name}" for s in d.scalars]
            lines = [semantics, f'extern "C" __global__ void <entry>({", ".join(params)})',
                     "Annotation: // peak: entry=<entry> grid=(gx, gy, gz) block=(bx, by, bz) shared=<dynamic bytes>.",
                     "Buffers are 256-byte aligned; sizes need not be multiples of any tile unless the session says "
                     "so."]
            if backend == "hip":
                lines.append(_HIP_NOTE)
        shapes = "; ".join(f"{b.name}: {' x '.join(self._extent(e) for e in b.shape) or 'one value'}"
                           for b, _ in buffers)
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
        try:
            return float(evaluate(self.declaration.flops, sizes, where="FLOPS"))
        except AnnotationError:  # a factor past 2**40 at a large candidate (a 3-D convolution's): more than any launch
            return math.inf

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
                         lp_words=("the float64 reference rounded to the output's dtype (the reference computes in "
                                   "float64 whatever its inputs' precision)" if self.declaration.reference_in_float64
                                   else Tolerance.lp_words),
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
        return self._fitted(plan, sizes)

    @property
    def own_constraints(self) -> tuple[str, ...]:
        return tuple(self.declaration.constraints)

    def fast_path_sizes(self, sizes: Sizes) -> list[dict[str, int]]:
        return self._fitted([(c, 0, True) for c in self._pitched(sizes)], sizes)

    def _fitted(self, plan: list[tuple[dict[str, int], int, bool]], sizes: Sizes) -> list[dict[str, int]]:
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
        """Candidates whose rows are whole 16-byte chunks, so that partial tiles meet a fast path: the pitch symbols
        at the session's values where those are multiples of 8 up to 256 (a head dimension, a channel count: the
        session's own fast path), then at multiples of 8 that no 16 divides (tails of a 64-wide slice), the other
        extents small and odd; then the session's pitch again with the innermost other extent (a sequence, the
        rows) near the session's, odd, and the rest 1: several tiles and a partial last one on the fast path (an
        attention kernel's D = 128 path met only S = 11, one tile, and a loop wrong past its first tile or at a
        tile remainder there would pass). The sampled symbols keep the session's values."""
        pitch = self._pitch_symbols()
        others = [s for s in self.symbols if s not in pitch and s not in self.sampled]
        ragged = {s: _RAGGED[i % len(_RAGGED)] for i, s in enumerate(others)}
        other = {s: _PITCHED[i % len(_PITCHED)] for i, s in enumerate(pitch)}
        own = {s: sizes[s] if sizes[s] % 8 == 0 and sizes[s] <= 256 else other[s] for s in pitch}
        if not pitch:
            return []
        candidates = [{**own, **ragged}, {**other, **ragged}]
        if others:
            long_row = {**dict.fromkeys(others, 1), others[-1]: min(sizes[others[-1]], 512) + 3 | 1}
            candidates.append({**own, **long_row})
        return candidates

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


def _scalar(expr: str, sizes: Sizes) -> int:
    return evaluate(expr, sizes, where="SCALARS")
