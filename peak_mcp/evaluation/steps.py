"""Validation and timing, the same for every backend: runs inside a worker, over an `Executor`.

Validation: fresh random inputs per trial, alternating between two workspaces; outputs poisoned before each
launch; NaN guards before and after every buffer; inputs must come back unchanged; two launches on the same
inputs must agree bit for bit; the error against a float64 reference must stay under a bound that follows the
error a correct kernel can have. Where the executor keeps buffers on the device (cupy), inputs, reference and
checks are computed there. An executor that keeps host copies (Vulkan) of a GPU that CUDA also sees (the same
device UUID) gets cupy on that GPU beside it, where this worker can use it: inputs and outputs cross, the rest is
computed on the GPU. Either way a reference computed on a GPU is itself checked against a few elements computed on
the host, and the verdict says where it ran (`reference`).

Timing: warm-up, then repetitions each from a cold last-level cache, rotating both input sets so that a kernel
that caches results by value or by launch count is caught; every set's output is checked after the timed loop,
and on device arrays after every single timed launch (poisoned again before the next).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from peak_mcp.backends.base import Compiled, Executor
from peak_mcp.backends.tensor_maps import launch_geometry
from peak_mcp.core.dtypes import itemsize, to_float64
from peak_mcp.core.timing import Chunk, measure
from peak_mcp.evaluation.checks import (
    Finding,
    check_guards,
    check_inputs,
    check_outputs,
    check_same,
    overflow_hint,
    where,
)
from peak_mcp.evaluation.phases import Recheck, Timing, Verdict
from peak_mcp.evaluation.reference_cache import KEPT, SPARE, fresh_trial
from peak_mcp.evaluation.workspace import ALT_POISON, GUARD_PATTERN, POISON, Workspace
from peak_mcp.evaluation.wrong_count import any_wrong
from peak_mcp.problems.base import PROBLEM_CODE, BufferArg, Problem, Reference, Tolerance

HOST_REFERENCE_MAX_FLOPS = 2e11  # above this a host reference checks sampled rows; a device reference is whole
REFERENCE_AGREEMENT = 1e-9  # device vs host float64 reference, relative to the error scale
Progress = Callable[[str], None]
HOST = "host (numpy)"
CUDA = "cuda (cupy)"


def on_device(executor: Executor) -> bool:
    """Buffers live on the device (cupy) and the validator computes there."""
    return executor.xp is not np


@dataclass(frozen=True)
class ArrayModule:
    """Where the validator computes: `xp` (numpy or cupy), labelled for the verdict; `device` is the CUDA device
    cupy is set to before each use (None where the executor set it); `why` says why a GPU was not used."""

    xp: Any
    label: str
    device: int | None = None
    why: str = ""


def array_module(executor: Executor) -> ArrayModule:
    """The executor's own module where its buffers live on the device; else cupy on the same GPU, where this worker
    can use it; else numpy. Chosen once per worker (per device UUID)."""
    if on_device(executor):
        return ArrayModule(executor.xp, CUDA)
    return cuda_beside(executor.facts.properties.get("device_uuid"))


@functools.cache
def cuda_beside(device_uuid: str | None) -> ArrayModule:
    """cupy on the CUDA device whose UUID is `device_uuid` (hex), once it has computed something there; numpy with
    the reason otherwise. Another GPU is never used: its own worker may be timing a kernel on it."""
    if not device_uuid:
        return ArrayModule(np, HOST, why="the device reports no UUID")
    try:
        import cupy
        from cuda.bindings import driver

        if (err := driver.cuInit(0)[0]) != driver.CUresult.CUDA_SUCCESS:
            return ArrayModule(np, HOST, why=f"cuInit failed: {err.name}")
        for ordinal in range(driver.cuDeviceGetCount()[1]):
            if driver.cuDeviceGetUuid(driver.cuDeviceGet(ordinal)[1])[1].bytes.hex() == device_uuid:
                with cupy.cuda.Device(ordinal):
                    cupy.cuda.Stream.null.use()  # not a stream a closed CUDA executor left current (it crashed)
                    float((cupy.arange(3, dtype=cupy.float64) * 2).sum())  # a context, a kernel compile, a copy
                return ArrayModule(cupy, CUDA, ordinal)
        return ArrayModule(np, HOST, why=f"no CUDA device has the UUID {device_uuid}")
    except Exception as exc:  # no cupy, no driver, no usable context: the host computes
        return ArrayModule(np, HOST, why=f"{type(exc).__name__}: {exc}")


class ReferenceMismatch(RuntimeError):
    """The device's float64 reference disagrees with the host's: the server, not the kernel, is wrong."""


@dataclass
class InputSet:
    ws: Workspace
    inputs: dict[str, Any] = field(default_factory=dict)
    refs: dict[str, Reference] = field(default_factory=dict)


@dataclass
class Validated:
    """A verdict plus what the benchmark reuses: the workspaces, loaded with inputs and their references."""

    verdict: Verdict
    sets: list[InputSet] = field(default_factory=list)

    def close(self) -> None:
        beside = next((s.ws.xp for s in self.sets if s.ws.xp is not s.ws.host), None)
        for s in self.sets:
            s.ws.close()
        self.sets = []
        if beside is not None:  # cupy beside Vulkan: its cached blocks go back to the GPU the Vulkan buffers share
            beside.get_default_memory_pool().free_all_blocks()


def _fail(finding: Finding, trials: int, sets: list[InputSet], reference: str) -> Validated:
    return Validated(Verdict.model_validate({**finding.as_verdict(), "trials": trials, "reference": reference}), sets)


def _reference(xp: Any, problem: Problem, inputs: dict[str, Any], sizes: dict[str, int], dtype: str,
               seed: int, spot_check: bool) -> dict[str, Reference]:
    limit = HOST_REFERENCE_MAX_FLOPS if xp is np else float("inf")
    refs = problem.reference(inputs, sizes, dtype, seed, limit, xp)
    if spot_check and xp is not np and problem.independent_reference:
        name, ref = next(iter(refs.items()))
        total = int(ref.values.size)
        picks = np.unique(np.concatenate([[0, total - 1], np.random.default_rng(seed).integers(0, total, 30)]))
        picks = problem.host_picks(picks, sizes)
        expected, _ = problem.reference_at(inputs, sizes, dtype, picks, xp.asnumpy)
        got = xp.asnumpy(ref.values[xp.asarray(picks)])
        gap = np.abs(got - expected) / (xp.asnumpy(ref.scale[xp.asarray(picks)]) + 1e-300)
        if float(gap.max()) > REFERENCE_AGREEMENT:
            raise ReferenceMismatch(f"the device float64 reference for {name} disagrees with the host's by "
                                    f"{float(gap.max()):.2e} error scales; the validator cannot be trusted here")
    return refs


# A CPU Vulkan driver (lavapipe) runs the shader in the worker process: groupshared memory is the worker's heap,
# and a read past a groupshared array returns whatever lies beside it there (the worker's own data). Such values
# are not quoted back to the agent.
HOST_MEMORY = ("this kernel declares groupshared memory and runs on a CPU Vulkan device, where a read outside a "
               "groupshared array would return the server's own memory, so no value it wrote is quoted (a precaution, "
               "not a finding: the cause may as well be the arithmetic). Where the wrong elements are and what was "
               "expected is above; to see the values, test the same arithmetic in a kernel without groupshared")


def values_withheld(executor: Executor, kernel: Compiled) -> str | None:
    """Why the values `kernel` writes must not be quoted on `executor`'s device (HOST_MEMORY), or None."""
    on_cpu = executor.backend == "hlsl" and executor.facts.properties.get("device_type") == "cpu"
    return HOST_MEMORY if on_cpu and kernel.resources.get("groupshared_bytes") else None


def _launch_and_check(executor: Executor, kernel: Compiled, geometry: dict[str, Any], s: InputSet,
                      problem: Problem, dtype: str, passed_before: int = 0) -> tuple[Finding | None, dict[str, Any]]:
    s.ws.poison_outputs()
    executor.run(kernel, s.ws.handles, s.ws.scalars, geometry)
    finding = check_guards(s.ws) or check_inputs(s.ws, s.inputs)
    if finding:
        return finding, {}
    return check_outputs(s.ws, s.refs, problem.tolerance(dtype, s.ws.sizes), values_withheld(executor, kernel),
                         passed_before=passed_before)


def _explain_nan(executor: Executor, kernel: Compiled, geometry: dict[str, Any], s: InputSet, problem: Problem,
                 dtype: str, finding: Finding) -> Finding:
    """NaN in the output: launch with zero guards, then with NaN guards again. The kernel read past an input only
    if the NaN goes with the zero guards and comes back with the NaN ones (stale shared memory can change between
    launches by itself); then NaN guards around one input at a time name the inputs it reads past."""

    def nan_now(pattern: np.ndarray | None, only: str | None = None) -> bool:
        if pattern is not None:
            s.ws.fill_guards(pattern, only)
        s.ws.poison_outputs()
        executor.run(kernel, s.ws.handles, s.ws.scalars, geometry)
        again, _ = check_outputs(s.ws, s.refs, problem.tolerance(dtype, s.ws.sizes))
        return again is not None and again.check in ("nan_or_inf", "unwritten_output")

    try:
        from_guards = not nan_now(np.zeros(4, np.uint8))
        if from_guards and nan_now(GUARD_PATTERN):
            # Which input: NaN guards around one at a time, zeros around the others.
            read_past = [b for b in s.ws.buffers if not b.arg.is_output and nan_now(GUARD_PATTERN, only=b.arg.name)]
        else:
            return finding  # the kernel makes NaN or Inf by itself (or not reproducibly)
    finally:
        s.ws.fill_guards()
    return Finding("out_of_bounds_read",
                   f"the kernel reads outside its input buffers: with NaN guard bytes around every buffer, "
                   f"{finding.details.get('count')} elements of {finding.buffer} came out NaN (first at "
                   f"{finding.details.get('indices')}); with zero guards they did not. "
                   + _read_past(read_past, s.ws.sizes), finding.buffer, finding.details)


def _read_past(buffers: list[Any], sizes: dict[str, int]) -> str:
    """Where to look: the inputs read past, each with its extents named by the size symbols they equal (an
    attention kernel reading K and V rows past S was told "(i < D, not i <= D)", the problem's last symbol)."""
    if not buffers:
        return "Check every index against its buffer's extents (index < extent, not <=) and the guards on every " \
               "load at the edges"
    said = []
    for buf in buffers:
        dims = []
        for extent in buf.arg.shape(sizes):
            named = [k for k, v in sizes.items() if v == extent]
            dims.append(f"{named[0]}={extent}" if len(named) == 1 else str(extent))
        said.append(f"{buf.arg.name} ({', '.join(dims)})")
    return (f"NaN guards around {' and '.join(said)} alone bring the NaN back, so the kernel reads past "
            f"{'it' if len(said) == 1 else 'each'}: check every index into {' and '.join(b.arg.name for b in buffers)} "
            "against those extents (index < extent, not <=) and the guards on every load at the edges")


def _confirm_unwritten(executor: Executor, kernel: Compiled, geometry: dict[str, Any], s: InputSet,
                       finding: Finding, tolerance: Tolerance | None = None) -> Finding | None:
    """Elements holding the poison's bits: launch again over a different poison. Only elements that keep it were
    never written; a kernel can write the all-ones NaN itself (garbage from uninitialized or racing shared memory
    propagates bit for bit through arithmetic), and then the output is NaN, not unwritten."""
    buf = s.ws.buffer(finding.buffer)
    s.ws.poison_outputs(ALT_POISON)
    executor.run(kernel, s.ws.handles, s.ws.scalars, geometry)
    stored = s.ws.body(finding.buffer).view(np.uint8).reshape(-1, buf.itemsize)
    if bool((stored == ALT_POISON).all(axis=1).any()):
        return finding
    if s.refs[finding.buffer].exact and tolerance is not None:  # all ones is -1 (or 255): a value, judged as one
        return check_outputs(s.ws, s.refs, tolerance, values_withheld(executor, kernel), poison=ALT_POISON)[0]
    return Finding("nan_or_inf",
                   f"{finding.details.get('count')} elements of {finding.buffer} are NaN (first at "
                   f"{finding.details.get('indices')}); the kernel wrote them, so it computes NaN from something it "
                   "read: uninitialized or racing shared memory, or memory outside its inputs",
                   finding.buffer, finding.details)


SETS_SHARE = 0.3  # of the device's memory, the most a validation's input sets may take between them


def set_bytes(problem: Problem, dtype: str, sizes: dict[str, int]) -> int:
    """What one input set holds on the validator's device: its buffers, the inputs it loads them from, and for each
    output element the reference's float64 value and error scale."""
    total = 0
    for arg in problem.arguments(dtype):
        if isinstance(arg, BufferArg):
            count = arg.count(sizes)
            total += count * itemsize(arg.dtype) + (count * 16 if arg.is_output else count * itemsize(arg.dtype))
    return total


def sets_that_fit(problem: Problem, dtype: str, sizes: dict[str, int], sets: int, where: ArrayModule) -> int:
    """`sets`, or fewer where that many would take more than SETS_SHARE of the device's memory (a 1.6G-element
    KernelBench softmax holds 45 GB a set). What one set gives up: timed launches alternating inputs at two
    addresses. A kernel that would replay a result still finds nowhere to keep one: a module's state between
    launches is refused at compile time, inputs are checked unchanged and outputs poisoned before every launch, and
    where the problem can perturb (matmul) the audit changes an input element before each."""
    if sets <= 1 or where.xp is np:
        return sets
    try:
        total = int(where.xp.cuda.runtime.memGetInfo()[1])
    except Exception:  # no such query (a host array module dressed as a device's): as asked
        return sets
    return max(1, min(sets, int(total * SETS_SHARE) // max(1, set_bytes(problem, dtype, sizes))))


def fresh_seed() -> int:
    """A seed for inputs no kernel may know in advance: from the OS, not the clock."""
    return int.from_bytes(os.urandom(4), "little") % 2**31


def _drawn(problem: Problem, xp: Any, dtype: str, sizes: dict[str, int], seed: int, *, stressed: bool,
           spot_check: bool, progress: Callable[[], None]) -> tuple[dict[str, Any], dict[str, Reference]]:
    """One input set and its reference, drawn from `seed` (the stress ranges where `stressed`). `progress` is called
    first where the problem's code is a file's: a hang from there on is the file's (pool.PROBLEM_CODE)."""
    if problem.source != "built-in":
        progress()
    inputs = (problem.stress_inputs if stressed else problem.make_inputs)(sizes, dtype, seed, xp)
    return inputs, _reference(xp, problem, inputs, sizes, dtype, seed, spot_check=spot_check)


def prepare(executor: Executor, problem: Problem, dtype: str, sizes: dict[str, int], *, trials: int, seed: int,
            progress: Progress, keep: bool = True, spare_fresh: bool = False,
            spare_revalidation: bool = False) -> int:
    """Before a kernel runs: the input sets and references that `validate` at these sizes, trials and seed will ask
    the reference cache for, drawn and kept (`keep`), so that the next submission finds them (a KernelBench file's
    references take 10-20 s). The same draws as validate's, so nothing a kernel meets differs. Also, where asked,
    fresh sets drawn from the OS's randomness, each for one use (reference_cache.SpareSets): `spare_fresh`, the
    fresh trial of a validation whose output is small; `spare_revalidation`, the validation on fresh inputs of a
    version faster than the vendor library (its usual ranges, then its stress ranges). `seed` is the session's:
    it names the session's kept sets and owns its spare ones. Returns the sets made."""
    where = array_module(executor)
    xp = where.xp
    if not KEPT.keeps(problem, xp):
        return 0
    if where.device is not None:
        xp.cuda.Device(where.device).use()
        xp.cuda.Stream.null.use()
    stress = trials >= 2 and problem.stress_ranges()
    fresh = fresh_trial(problem, dtype, sizes, trials)
    made = 0
    for trial in range(trials) if keep else ():
        stressed = bool(stress) and trial == trials - 1
        key = KEPT.key(problem, xp, dtype, sizes, seed + trial, stressed)
        if trial == fresh or key in KEPT:
            continue
        inputs, refs = _drawn(problem, xp, dtype, sizes, seed + trial, stressed=stressed, spot_check=trial == 0,
                              progress=lambda: progress(f"inputs and reference {PROBLEM_CODE} {problem.source}"))
        KEPT.put(key, xp, inputs, refs)
        made += key in KEPT
    # one set a use: the fresh trial's (never the first trial: that one's reference is spot-checked, see validate),
    # then the revalidation's, in the usual ranges and, where the problem has them, the stress ranges
    wanted = [False] if spare_fresh and fresh not in (None, 0) else []
    if spare_revalidation:
        wanted += [False, True] if problem.stress_ranges() else [False]
    for stressed in sorted(set(wanted)):
        key = SPARE.key(problem, xp, dtype, sizes, stressed, owner=seed)
        while SPARE.count(key) < wanted.count(stressed):
            inputs, refs = _drawn(problem, xp, dtype, sizes, fresh_seed(), stressed=stressed, spot_check=False,
                                  progress=lambda: progress(f"fresh inputs and reference {PROBLEM_CODE} "
                                                            f"{problem.source}"))
            if not SPARE.put(key, xp, inputs, refs):
                break  # no room: the validation draws its own
            made += 1
    return made


def validate(executor: Executor, kernel: Compiled, problem: Problem, dtype: str, sizes: dict[str, int], *,
             trials: int, seed: int, progress: Progress, sets: int = 2, module: ArrayModule | None = None,
             keep: bool = True, spot_check: bool = True, spare: bool = False,
             owner: int | None = None) -> Validated:
    """Run the checks on `trials` fresh input sets over `sets` workspaces; they stay loaded for the benchmark.
    `module`: where the validator computes, array_module(executor) unless given (tools compare host and GPU);
    `keep`: the input sets and references are kept for the next job with the same seed (reference_cache);
    `spot_check`: the first trial's device reference is checked against the host's at a few elements (a fact of the
    problem at these sizes, not of the inputs: a second validation at the same sizes may leave it out); `spare`: a
    validation on fresh inputs, which takes the sets drawn for it ahead (reference_cache.SpareSets) where there
    are any; the fresh trial of a validation that keeps its sets takes one too, unless it is the first trial
    (whose reference is spot-checked). `owner`: the session's seed, which owns its spare sets (default `seed`)."""
    geometry = launch_geometry(kernel.spec, problem, dtype, sizes)
    why = executor.check_geometry(kernel, geometry)
    if why:
        return Validated(Verdict(passed=False, check="launch_geometry", message=why, trials=0))
    where = module or array_module(executor)
    xp = where.xp
    if where.device is not None:
        xp.cuda.Device(where.device).use()
        xp.cuda.Stream.null.use()  # the thread's current stream may belong to an executor closed since
    made: list[InputSet] = []
    label = problem.reference_label(where.label)
    sets = sets_that_fit(problem, dtype, sizes, sets, where)
    try:
        for _ in range(max(1, min(sets, trials))):
            made.append(InputSet(Workspace(executor, problem, dtype, sizes, xp)))
        stats: dict[str, Any] = {}
        # With a few trials to spare, the last draws from the problem's stress ranges where it has them (large
        # values: an exp that overflows without the max subtracted, a sum of squares past f16's range).
        stress = trials >= 2 and problem.stress_ranges()
        # a trial drawn fresh only where sets are kept at all (a tool's own validator draws every set from its seeds)
        fresh = fresh_trial(problem, dtype, sizes, trials) if keep and KEPT.keeps(problem, xp) else None
        for trial in range(trials):
            s = made[trial % len(made)]
            s.inputs, s.refs = {}, {}  # a reused set's last arrays go before the next are made (device memory)
            stressed = stress and trial == trials - 1
            trial_seed = seed + trial if trial != fresh else fresh_seed()
            key = KEPT.key(problem, xp, dtype, sizes, trial_seed, bool(stressed)) if keep and trial != fresh else None
            kept = KEPT.get(key, xp)
            takes_spare = (spare or trial == fresh) and not (spot_check and trial == 0)
            drawn_ahead = SPARE.take(SPARE.key(problem, xp, dtype, sizes, bool(stressed),
                                               owner=seed if owner is None else owner), xp) if takes_spare else None
            if drawn_ahead is not None:
                s.inputs, s.refs = drawn_ahead
            elif kept is None:
                s.inputs, s.refs = _drawn(problem, xp, dtype, sizes, trial_seed, stressed=bool(stressed),
                                          spot_check=spot_check and trial == 0,
                                          progress=lambda n=trial + 1: progress(f"validate trial {n}/{trials}: inputs "
                                                                         f"and reference {PROBLEM_CODE} "
                                                                         f"{problem.source}"))
                KEPT.put(key, xp, s.inputs, s.refs)
            else:
                s.inputs, s.refs = kept
            progress(f"validate trial {trial + 1}/{trials}" + (" (stress ranges)" if stressed else "")
                     + (" (inputs and reference kept from an earlier submission)" if kept else "")
                     + (" (fresh inputs drawn ahead of this submission)" if drawn_ahead else ""))
            s.ws.load(s.inputs)
            finding, stats = _launch_and_check(executor, kernel, geometry, s, problem, dtype, passed_before=trial)
            if finding and finding.check == "unwritten_output":
                finding = _confirm_unwritten(executor, kernel, geometry, s, finding,
                                             problem.tolerance(dtype, sizes))
            if finding and finding.check == "nan_or_inf":
                finding = _explain_nan(executor, kernel, geometry, s, problem, dtype, finding)
            if finding and stressed:
                finding.message = (f"with inputs from the problem's stress ranges ({stress}), after {trial} trials "
                                   f"with its usual ones passed: {finding.message}")
                if finding.check == "nan_or_inf":
                    finding.message += overflow_hint(dtype, stress, trial)
            if finding:
                return _fail(finding, trial + 1, made, label)
            if trial == 0:
                progress("validate: repeat launch (race check)")
                first = {b.arg.name: s.ws.body(b.arg.name) for b in s.ws.outputs}
                # the other poison where an integer output may hold the first one's bits as its right value (-1):
                # an element left unwritten then differs between the launches
                s.ws.poison_outputs(ALT_POISON if any(r.exact for r in s.refs.values()) else POISON)
                executor.run(kernel, s.ws.handles, s.ws.scalars, geometry)
                finding = check_same(s.ws, first, values_withheld(executor, kernel))
                if finding:
                    return _fail(finding, 1, made, label)
        tol = problem.tolerance(dtype, sizes)
        return Validated(Verdict(passed=True, check=None, trials=trials, reference=label,
                                 message=f"all {trials} trials passed" + (f", the last with inputs in {stress}"
                                                                          if stress else "")
                                 + f" ({tol.summary()})", **stats), made)
    except BaseException:
        for s in made:
            s.ws.close()
        raise


class _LaunchAudit:
    """After every timed launch (device arrays only): count the launches whose output was wrong or unwritten,
    on the device without synchronizing (the executor poisons the output again before the next launch); then
    change one input element of that set and its reference, so no launch sees inputs an earlier one saw."""

    def __init__(self, sets: list[InputSet], problem: Problem, dtype: str, seed: int) -> None:
        self.sets, self.problem, self.dtype = sets, problem, dtype
        self.bound = problem.tolerance(dtype, sets[0].ws.sizes).elementwise
        self.rng = np.random.default_rng(seed)
        self.bad = [0] * len(sets)  # device scalars after the first launch
        self.last: int | None = None  # launches from here on are each set's final one: inputs stay as they saw them

    def __call__(self, rep: int) -> None:
        i = rep % len(self.sets)
        s = self.sets[i]
        xp = s.ws.xp
        wrong = 0
        for buf in s.ws.outputs:
            ref = s.refs[buf.arg.name]
            stored = s.ws.body(buf.arg.name).reshape(-1)
            if ref.indices is not None:  # only these elements have a reference
                stored = stored[ref.indices]
            # NaN compares false, so unwritten (poisoned) elements count as wrong too.
            wrong = wrong + any_wrong(xp, stored, buf.arg.dtype, ref.values, ref.scale, self.bound)
        self.bad[i] = self.bad[i] + wrong
        if self.last is not None and rep >= self.last:
            return
        self.perturb(i)

    def perturb(self, i: int) -> None:
        """Change one input element of set i, and its reference with it."""
        s = self.sets[i]
        changed = self.problem.perturb(s.inputs, s.refs, s.ws.sizes, self.dtype, self.rng, s.ws.xp)
        for name, (index, value) in changed.items():
            s.ws.write_element(name, index, value)

    def failures(self) -> list[int]:
        return [int(b) for b in self.bad]


def _rotated(items: list[Any], offset: int) -> list[Any]:
    start = offset % len(items)
    return items[start:] + items[:start]


def benchmark(executor: Executor, kernel: Compiled, problem: Problem, dtype: str, sizes: dict[str, int],
              validated: Validated, *, time_budget_s: float, min_reps: int, max_reps: int,
              progress: Progress) -> Timing:
    """Time the kernel from a cold cache over the validated input sets; check every set's output afterwards."""
    sets = validated.sets
    assert sets, "benchmark needs a validated workspace"
    args = [s.ws.handles for s in sets]
    scalars = sets[0].ws.scalars
    geometry = launch_geometry(kernel.spec, problem, dtype, sizes)
    poison = [[(s.ws.handles[s.ws.buffers.index(b)], b.nbytes) for b in s.ws.outputs] for s in sets]
    # The perturbation sequence comes from the OS, so a kernel cannot replay it from what it can observe.
    audit = _LaunchAudit(sets, problem, dtype, seed=int.from_bytes(os.urandom(8), "little")) \
        if on_device(executor) else None
    late: dict[int, Finding] = {}  # input set -> what a check after a chunk found (host-copied buffers)
    launches = 0

    def warm(chunk: Chunk) -> list[float]:
        times = executor.time(kernel, args, scalars, geometry, reps=chunk.reps, cold_cache=True)
        if audit:  # the first timed launch must not see the inputs warm-up saw
            for i in range(len(sets)):
                audit.perturb(i)
        return times

    def timed(chunk: Chunk) -> list[float]:
        nonlocal launches
        after = None
        if audit:
            audit.last = chunk.total - len(sets)  # the final rotation leaves inputs as its launches saw them
            after = lambda rep: audit(chunk.offset + rep)  # noqa: E731
        # Launch i of the chunk is timed launch offset + i overall: it uses set (offset + i) % n, as the audit
        # expects, whatever the chunk's length.
        times = executor.time(kernel, _rotated(args, chunk.offset), scalars, geometry, reps=chunk.reps,
                              cold_cache=True, poison=_rotated(poison, chunk.offset), after_each=after)
        launches = chunk.offset + chunk.reps
        return times

    def checked() -> bool:  # host-copied buffers: check the latest launch of every set after each chunk
        if audit is None:
            late.update({i: f for i, s in enumerate(sets)
                         if (f := check_outputs(s.ws, s.refs, problem.tolerance(dtype, s.ws.sizes),
                                                values_withheld(executor, kernel),
                                                passed_before=1)[0]) is not None})  # validation passed
        return not late

    progress("benchmark: warm-up")
    summary = measure(timed, warm_timer=warm, budget_s=time_budget_s, min_reps=min_reps, max_reps=max_reps,
                      flops=problem.flops(sizes), min_bytes=problem.min_bytes(sizes, dtype), rotation=len(sets),
                      after_chunk=checked, progress=progress)
    progress("benchmark: re-check of guards, inputs and outputs after the timed launches")
    recheck = _recheck(sets, problem, dtype, audit, launches, late)
    return Timing(**summary, input_sets=len(sets), recheck=recheck)


def _recheck(sets: list[InputSet], problem: Problem, dtype: str, audit: _LaunchAudit | None,
             launches: int, late: dict[int, Finding]) -> Recheck:
    """Guards, inputs and outputs after the timed loop: passed, or the failing check. Host-copied
    outputs were checked after every chunk, the last included (`late`); device ones by the audit and here."""
    for i, s in enumerate(sets):
        finding = check_guards(s.ws) or check_inputs(s.ws, s.inputs) or late.get(i)
        if finding is None and s.ws.xp is not np and problem.independent_reference:  # all were on a GPU
            finding = _host_spot_check(s, problem, dtype)
        if finding is None and audit is not None and audit.failures()[i]:
            bad, per_set = audit.failures()[i], (launches + len(sets) - 1 - i) // len(sets)
            finding = Finding("wrong_result", f"{bad} of the {per_set} timed launches on input set {i + 1} left a "
                                              "wrong or unwritten output", None, {"launches": bad})
        if finding:
            return Recheck(passed=False, check=finding.check, input_set=i + 1,
                           message=f"after {launches} timed launches rotating {len(sets)} input sets, input set "
                                   f"{i + 1}: {finding.message}. A kernel must do all of its work on every launch: "
                                   "no skipping work on repeated launches, no results cached between launches")
    return Recheck(passed=True)


def _host_spot_check(s: InputSet, problem: Problem, dtype: str, count: int = 32) -> Finding | None:
    """The final output at `count` elements drawn from the OS, against float64 values the host computes from the
    inputs the kernel read: nothing the kernel could have written to (references, counters) is trusted here."""
    xp = s.ws.xp
    name = next(iter(s.refs))
    total = int(s.refs[name].values.size)
    picks = np.unique(np.frombuffer(os.urandom(8 * count), np.uint64) % np.uint64(total)).astype(np.int64)
    picks = problem.host_picks(picks, s.ws.sizes)
    inputs = {b.arg.name: s.ws.body(b.arg.name) for b in s.ws.buffers if not b.arg.is_output}
    to_host = getattr(xp, "asnumpy", np.asarray)
    expected, scale = problem.reference_at(inputs, s.ws.sizes, dtype, picks, to_host)
    out = s.ws.buffer(name)
    got = to_float64(to_host(s.ws.body(name)[xp.asarray(picks)]), out.arg.dtype)
    bound = problem.tolerance(dtype, s.ws.sizes).elementwise * scale
    wrong = ~(np.abs(got - expected) <= bound)
    if not wrong.any():
        return None
    at = where([int(i) for i in picks[wrong][:3]], out.arg.shape(s.ws.sizes))
    return Finding("wrong_result", f"{int(wrong.sum())} of {picks.size} elements of the last timed launch's "
                                   f"{name}, recomputed on the host, are wrong (first at {at})", name)
