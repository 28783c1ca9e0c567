"""The worker-side half of a `DeclaredProblem`: the calls into the problem file's own code (inputs, stress
inputs, references, the error scale, the rows a host check recomputes, torch's yardstick), each result checked
against the declaration before it is used. Runs only where problem code may run (problems/loading.py)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from peak_mcp.core.chunks import spans_of
from peak_mcp.core.dtypes import EXACT_LIMITS, STORAGE, from_float, to_float64, uniform
from peak_mcp.core.errors import InvalidInput
from peak_mcp.core.expressions import evaluate
from peak_mcp.problems.base import Reference, Sizes, Tolerance
from peak_mcp.problems.code import LocalCode, fix_hint
from peak_mcp.problems.declaration import UNIT_ROUNDOFF, BufferDecl, int_range_at
from peak_mcp.problems.host_call import HostCall
from peak_mcp.problems.loading import ProblemCodeError

# Tolerance defaults (docs/problems.md, Tolerance; DeclaredProblem.references): the bound of element i is
# FACTOR * (|lp_i - ref_i| + FLOOR * (u_out * m_i + u_f32 * s_i)), and the relative L2 error stays under REL_L2_SHARE
# of the bounds' norm. Measured with tools/false_failures.py (every shipped kernel of every problem, at every sampled
# size) and a simulation of summation orders and fast-math exp at the default sizes: see the commit that set them.
FACTOR = 2.0
FLOOR = 4.0
REL_L2_SHARE = 0.25
COMPUTE_ROUNDOFF = 2.0**-24  # kernels compute in f32 whatever the storage type
# SINGLE_VALUE: an output of one element (a loss, a total) has no population for rms(ref), and its relative L2 error
# is its relative error. Under cancellation (a sum of a normal draw near 0) m = |ref| collapsed the bound and a
# correct kernel summing in another order failed (0.3% of seeds at 16K terms, and the rel L2 check at a quarter of the
# bound failed more). So its m is also |lp - ref| / u_f32 (the f32 reference's own error in roundoffs: what the
# cancelling terms weigh), and its L2 bound is its elementwise bound. Simulated (a dot product of 16K normal pairs,
# 300 seeds, a sequential f32 sum): at most 0.11 of the bound, while one term left out is over it in 93%.
# The most a host spot check's rows may cost (FLOPS per BATCH row times rows): past it the checked elements are drawn
# from fewer rows, so that a problem whose rows are heavy (an attention head: 4 S^2 D) is checked in seconds. Not
# lowered for speed: it is the one check a kernel that overwrites the device's references cannot defeat, and fewer
# rows let a kernel wrong in one row pass it more often (at 2e9 a ResNet-50 3x3 layer's re-check took 8 of its 32
# images, 0.1 s instead of 1.3-1.4 s on an H200's host; a review put the cost in caught faults first). A file without
# FLOPS (a KernelBench LayerNorm) is recomputed at every row its picks fall in.
HOST_CHECK_FLOPS = 2e10


def magnitude_of(ref: Any, xp: Any, rms: float | None = None) -> Any:
    """m = max(|ref|, rms) per element: the magnitude every bound is relative to. `rms`: the whole reference's, where
    `ref` is a chunk of it (else ref's own)."""
    if rms is None:
        rms = float(xp.sqrt(xp.mean(ref * ref))) if ref.size else 0.0
    return xp.maximum(xp.abs(ref), rms or 1.0)


ROW_TRAITS = {"row_reduction", "normalization", "softmax"}  # ops that reduce along each row


class FileCalls:
    """Mixed into DeclaredProblem: needs its `declaration`, `code`, `name` and the Problem interface."""

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
            if buf.exact:  # integers uniform in the declared [low, high), whatever generate and RANGE say
                inputs[buf.name] = self._draw_exact(buf, sizes, count, seed * 64 + i, xp)
                continue
            if self.declaration.has_generate and (generate or buf.name not in ranges):
                values = self.code.generate(buf.name, shape, [seed, i])
                # checked as the float32 it is stored from: no float64 copy, and a value past float32's range is
                # the file's Inf, never an infinite input
                values = self._checked_array("generate", values, shape, f"input {buf.name}", np, np.float32)
                stored = xp.asarray(from_float(values.reshape(-1), stored_dtype))
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

    def _draw_exact(self, buf: BufferDecl, sizes: Sizes, count: int, seed: int, xp: Any) -> Any:
        low, high = int_range_at(buf, sizes)
        if low >= high:
            raise InvalidInput(f"input {buf.name}'s range [{low}, {high}) is empty at sizes {dict(sizes)}",
                               f"choose sizes where {buf.int_range[1] if buf.int_range else high} > "
                               f"{buf.int_range[0] if buf.int_range else low}.")
        values = xp.floor(uniform(xp, seed, count) * (high - low)) + low
        return xp.minimum(values, high - 1).astype(STORAGE[buf.dtype or "int32"])

    def _checked_array(self, function: str, value: Any, shape: tuple[int, ...], what: str, xp: Any,
                       precision: Any = np.float64) -> Any:
        """`value` as a `precision` array of `shape` (numpy or cupy), or a ProblemCodeError that says what is
        wrong."""
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
        with np.errstate(over="ignore"):  # past float32's range: Inf, refused next
            value = value.astype(precision)
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
        lp), computed with xp where the function takes it, else on the host (`_computed` has checked there is one)."""
        host = not self.declaration.reference_takes_xp and xp is not np
        mod = np if host else xp
        args = []
        for buf in self.declaration.inputs:
            value = to_float64(inputs[buf.name], buf.dtype or dtype).reshape(self._shape(buf, sizes))
            if host:
                value = xp.asnumpy(value)
            args.append(value.astype(precision, copy=False))  # a fresh array: no second copy
        keywords = self._keywords("reference", sizes, mod if self.declaration.reference_takes_xp else None)
        result = self._call("reference", *args, **keywords)
        outputs = self._outputs("reference", result, sizes, mod)
        return {k: xp.asarray(v) for k, v in outputs.items()} if host else outputs

    def _error_scale_keywords(self, sizes: Sizes, dtype: str, xp: Any) -> dict[str, Any]:
        keywords = self._keywords("error_scale", sizes, None, dtype)
        found = self.code.parameters("error_scale")
        if found is not None and "xp" in found[0]:
            keywords["xp"] = xp
        return keywords

    def _error_scale(self, inputs: Mapping[str, Any], sizes: Sizes, dtype: str, xp: Any) -> dict[str, Any]:
        """The file's error_scale: on the host (numpy), or where it takes `xp` with xp beside the reference (an
        error scale as costly as the reference itself, attention's); `dtype` (the session's) where it takes it."""
        keywords = self._error_scale_keywords(sizes, dtype, xp)
        mod = xp if "xp" in keywords else np
        args = [v if mod is xp else xp.asnumpy(v) if xp is not np else v for v in
                (to_float64(inputs[b.name], b.dtype or dtype).reshape(self._shape(b, sizes))
                 for b in self.declaration.inputs)]
        result = self._call("error_scale", *args, **keywords)
        scales = self._outputs("error_scale", result, sizes, mod)
        return {k: xp.abs(xp.asarray(v)) for k, v in scales.items()}

    def _stored_args(self, inputs: Mapping[str, Any], sizes: Sizes, dtype: str, xp: Any) -> list[Any]:
        """The inputs as they cross to a problem host: their stored values, shaped, where the host widens them
        exactly as to_float64 does (every storage type but bf16, whose bits cross as the float32 they are)."""
        args = []
        for buf in self.declaration.inputs:
            storage = buf.dtype or dtype
            value = inputs[buf.name]
            if storage == "bf16":
                value = to_float64(value, storage).astype(np.float32)
            args.append(value.reshape(self._shape(buf, sizes)))
        return args

    def _computed(self, inputs: Mapping[str, Any], sizes: Sizes, dtype: str,
                  xp: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]:
        """The float64 reference, the float32 one (lp) and the error scale (None without one). A problem host
        (a link with `calls`) runs them in one request on inputs sent once as stored; elsewhere one call each."""
        if not self.declaration.has_reference:
            raise ProblemCodeError(f"{self.declaration.path} defines no reference function",
                                   "its sessions are checked against the kernel given as start_session's "
                                   "reference_kernel")
        calls = getattr(self.code, "calls", None)  # a problem host's link (problem_link.RemoteCode) has it
        widens = self.declaration.reference_in_float64  # its float32 run is its float64 one: not made
        if calls is None:  # the file in this process: nothing crosses
            exact = self._reference_values(inputs, sizes, dtype, xp, np.float64)
            rough = dict(exact) if widens else self._reference_values(inputs, sizes, dtype, xp, np.float32)
            scales = self._error_scale(inputs, sizes, dtype, xp) if self.declaration.has_error_scale else None
            return exact, rough, scales
        host = not self.declaration.reference_takes_xp and xp is not np
        mod = np if host else xp
        keywords = self._keywords("reference", sizes, mod if self.declaration.reference_takes_xp else None)
        wanted = [HostCall("reference", "float64", keywords)]
        if not widens:
            wanted.append(HostCall("reference", "float32", keywords))
        scale_mod = None
        if self.declaration.has_error_scale:
            scale_keywords = self._error_scale_keywords(sizes, dtype, xp)
            scale_mod = xp if "xp" in scale_keywords else np
            wanted.append(HostCall("error_scale", "float64", scale_keywords))
        results = calls(self._stored_args(inputs, sizes, dtype, xp), wanted)
        with self._server_work("the server checks the reference's answer and moves it to the device"):
            exact = self._outputs("reference", results[0], sizes, mod)
            rough = None if widens else self._outputs("reference", results[1], sizes, mod)
            if host:
                exact = {k: xp.asarray(v) for k, v in exact.items()}
                rough = None if rough is None else {k: xp.asarray(v) for k, v in rough.items()}
            # references() pops it output by output; widened, it is the float64 reference (one device copy, not two)
            rough = dict(exact if rough is None else rough)
            scales = None
            if scale_mod is not None:
                scales = {k: xp.abs(xp.asarray(v)) for k, v in
                          self._outputs("error_scale", results[-1], sizes, scale_mod).items()}
        return exact, rough, scales

    def _server_work(self, message: str) -> contextlib.AbstractContextManager[None]:
        """Where the problem's code runs in a problem host, the worker's own work on its answer is said while it
        lasts (problem_link.RemoteCode.server_work: a 12 GiB reference outlasted the inactivity limit)."""
        working = getattr(self.code, "server_work", None)
        return working(message) if working is not None else contextlib.nullcontext()

    def references(self, inputs: Mapping[str, Any], sizes: Sizes, dtype: str, xp: Any) -> dict[str, Reference]:
        """Every output's reference and bound. The bound of element i is

            factor * (|lp_i - ref_i| + floor * (u_out * m_i + u_f32 * s_i))

        ref: the reference in float64; lp: the same reference fed the stored inputs in float32 and rounded to the
        output's dtype (what a straightforward correct kernel computes); m = max(|ref|, rms(ref)) (rounding the
        output: u_out is its dtype's unit roundoff); s: the problem's error scale, m by default (computing in f32).
        It is folded into Reference.scale over the tolerance's factor * floor * u_f32. The relative L2 error, taken
        against ||m||, must stay under REL_L2_SHARE of the bounds' norm (or the file's TOLERANCE rel_l2)."""
        tol = self.tolerance(dtype)
        exact, rough, scales = self._computed(inputs, sizes, dtype, xp)
        refs = {}
        with self._server_work("the server folds the reference's bound"):
            for buf in self.declaration.outputs:
                out_dtype = buf.dtype or dtype
                ref = exact[buf.name].reshape(-1)
                if buf.exact:
                    refs[buf.name] = self._exact_reference(buf, ref, xp)
                    continue
                rough_values = rough.pop(buf.name).reshape(-1)  # popped: gone with this output's bound
                scale = scales[buf.name].reshape(-1) if scales is not None else None
                refs[buf.name] = self._chunked_bound(ref, rough_values, scale, self.reduction_length(sizes),
                                                     out_dtype, tol, xp)
        return refs

    def _chunked_bound(self, ref: Any, rough: Any, scale: Any | None, length: int, out_dtype: str, tol: Tolerance,
                       xp: Any, whole: Any | None = None) -> Reference:
        """`bounded` over chunks of the output: lp, m, |lp - ref| and the folded scale of a chunk at a time, so the
        bound costs one float64 array beside the reference (a 1.6G-element KernelBench output held seven at once,
        over 100 GB, and ran an H200 out of memory). `whole`: the output `ref` is some elements of (its rms and
        its size are the whole output's); its norms are then those of the elements only."""
        whole = ref if whole is None else whole
        rms = math.sqrt(sum(float(xp.sum(whole[p] * whole[p])) for p in spans_of(whole.size)) / whole.size) \
            if whole.size else 0.0
        folded = xp.empty(ref.shape, np.float64)
        magnitude_sq = folded_sq = 0.0
        for part in spans_of(ref.size):
            r = ref[part]
            lp = to_float64(from_float(rough[part].astype(np.float32), out_dtype), out_dtype)
            magnitude = magnitude_of(r, xp, rms)
            deviation = xp.abs(lp - r)
            if whole.size == 1:  # one value (a loss): see SINGLE_VALUE
                magnitude = xp.maximum(magnitude, deviation / COMPUTE_ROUNDOFF)
            s = scale[part] if scale is not None else math.sqrt(length) * magnitude
            folded[part] = self._folded(s, magnitude, deviation, out_dtype, tol)
            magnitude_sq += float(xp.sum(magnitude * magnitude))
            folded_sq += float(xp.sum(folded[part] * folded[part]))
        return self._bounded_reference(ref, folded, math.sqrt(magnitude_sq), math.sqrt(folded_sq), tol)

    def _exact_reference(self, buf: BufferDecl, ref: Any, xp: Any) -> Reference:
        """An integer or bool output's reference: the float64 values must be whole numbers the type holds (a
        reference that returns a float there is the problem's fault); the kernel's must equal them."""
        least, most = EXACT_LIMITS[buf.dtype or "int32"]
        bad = (ref != xp.round(ref)) | (ref < least) | (ref >= most)
        if bool(bad.any()):
            at = int(xp.flatnonzero(bad)[0])
            raise self._bad("reference", f"returned {float(ref[at])!r} at flat index {at} of output {buf.name}, "
                                         f"which is {buf.dtype}: a whole number in [{least}, {most}) is needed")
        return Reference(ref, None, xp.zeros_like(ref), exact=True)

    def bounded(self, ref: Any, magnitude: Any, scale: Any, deviation: Any, out_dtype: str, tol: Tolerance,
                xp: Any) -> Reference:
        """`ref` with the bound factor * (deviation + floor * (u_out * m + u_f32 * s)) folded into its scale (over
        the tolerance's factor * floor * u_f32), and its relative L2 bound: REL_L2_SHARE of the bounds' norm against
        ||m||, or the file's TOLERANCE rel_l2. `deviation`: |lp - ref| for a Python reference, a kernel's
        run-to-run spread for a kernel one."""
        folded = self._folded(scale, magnitude, deviation, out_dtype, tol)
        return self._bounded_reference(ref, folded, float(xp.linalg.norm(magnitude)), float(xp.linalg.norm(folded)),
                                       tol)

    @staticmethod
    def _folded(scale: Any, magnitude: Any, deviation: Any, out_dtype: str, tol: Tolerance) -> Any:
        return (scale + magnitude * (UNIT_ROUNDOFF[out_dtype] / COMPUTE_ROUNDOFF)
                + deviation / (tol.floor * COMPUTE_ROUNDOFF))

    def _bounded_reference(self, ref: Any, folded: Any, magnitude_norm: float, folded_norm: float,
                           tol: Tolerance) -> Reference:
        norm = magnitude_norm or 1.0
        given = self.declaration.tolerance
        share = 1.0 if ref.size == 1 else REL_L2_SHARE  # one value: its L2 error is its error (SINGLE_VALUE)
        rel_l2 = given.rel_l2 if given and given.rel_l2 else share * tol.elementwise * folded_norm / norm
        return Reference(ref, None, folded, norm=norm, rel_l2=rel_l2)

    def reference(self, inputs: Mapping[str, Any], sizes: Sizes, dtype: str, seed: int, max_flops: float,
                  xp: Any) -> dict[str, Reference]:
        return self.references(inputs, sizes, dtype, xp)

    def reduction_length(self, sizes: Sizes) -> int:
        """The length of the longest reduction behind one output element, whose rounding error in an order other
        than the reference's grows with its square root: REDUCTION where declared; else, with BATCH, the elements of
        one batch row of the largest input (a row-wise op reduces along its row); else input elements over output
        elements (a sum of each row: its length; an elementwise op: 1), at least the last output axis for a row op
        (traits row_reduction, normalization, softmax)."""
        d = self.declaration
        if d.reduction is not None:
            return max(1, evaluate(d.reduction, sizes))
        size = lambda buf: math.prod(evaluate(e, sizes) for e in buf.shape)  # noqa: E731
        axes = d.batch_axes
        if axes:
            rows = [size(b) // max(1, self._rows(sizes)) for b in d.inputs if tuple(b.shape[:len(axes)]) == axes]
            if rows:
                return max(1, max(rows))
        estimate = max(1, sum(map(size, d.inputs)) // max(1, sum(map(size, d.outputs))))
        if set(getattr(self, "traits", ())) & ROW_TRAITS and d.outputs and d.outputs[0].shape:
            # a row op (declared, or probed from its reference) reduces along its rows: the last axis, though it
            # has as many inputs as outputs (a LayerNorm's estimate of 1 failed a correct kernel by an ulp)
            return max(estimate, evaluate(d.outputs[0].shape[-1], sizes))
        return estimate

    def _rows(self, sizes: Sizes) -> int:
        """How many BATCH rows an output has: the product of the BATCH axes."""
        return math.prod(sizes[a] for a in self.declaration.batch_axes)

    def host_picks(self, picks: np.ndarray, sizes: Sizes) -> np.ndarray:
        """`picks` (flat indices into the first output) moved into at most as many BATCH rows as the host may
        recompute within HOST_CHECK_FLOPS: the rows of the first picks, in the order drawn, are kept and every
        other pick moves to one of them at the same place within its row. Without BATCH or FLOPS, or when the rows
        are cheap, `picks` unchanged."""
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
            return self._first_at(host, sizes, dtype, np.asarray(indices))
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
        return self._first_at(host, picked, dtype, where_in * per_row + np.asarray(indices) % per_row)

    def _first_at(self, inputs: Mapping[str, Any], sizes: Sizes, dtype: str,
                  at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The first output's float64 values and folded scales at flat `at`, on the host: as `references` has
        them, the bound's one whole-output term (the reference's rms) from all of it and the rest only at `at` (a
        spot check of 32 elements built the bound of the whole output: 3 s of numpy at 67M elements)."""
        exact, rough, scales = self._computed(inputs, sizes, dtype, np)
        buf = self.declaration.outputs[0]
        ref = exact[buf.name].reshape(-1)
        if buf.exact:
            whole = self._exact_reference(buf, ref, np)
            return whole.values[at], whole.scale[at]
        scale = scales[buf.name].reshape(-1)[at] if scales is not None else None
        bound = self._chunked_bound(ref[at], rough[buf.name].reshape(-1)[at], scale, self.reduction_length(sizes),
                                    buf.dtype or dtype, self.tolerance(dtype), np, whole=ref)
        return bound.values, bound.scale

    def torch_reference(self) -> Callable[..., Any] | None:
        """The problem file's torch_reference (worker side), for the torch yardsticks; None when it has none or
        runs elsewhere (a problem host times it: `self.code.torch_timings`)."""
        if not self.declaration.has_torch_reference or not isinstance(self.code, LocalCode):
            return None
        return self.code.torch_reference()

    def torch_keywords(self, sizes: Sizes) -> dict[str, Any]:
        """The size keywords torch_reference takes (worker side)."""
        return self._keywords("torch_reference", sizes)
