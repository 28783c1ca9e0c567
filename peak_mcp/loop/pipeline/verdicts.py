"""What a worker's result means for a version: the first failing check in order of blame, a speed no correct kernel
can reach, and what a version right only at the session's sizes is told. No store, no MCP: the service records
what these return."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from peak_mcp.core.devices import Device
from peak_mcp.core.text import clipped
from peak_mcp.core.units import speed
from peak_mcp.evaluation.generality import LAUNCH_LIMIT
from peak_mcp.evaluation.phases import Generality, Recheck, SizeFailure, Verdict
from peak_mcp.problems.base import Problem
from peak_mcp.runner.replies import EvaluateResult
from peak_mcp.store.records import Outcome, Status
from peak_mcp.store.reports import compile_failure

IMPOSSIBLE_SPEED_MARGIN = 1.02  # over the datasheet peak: room for clocks a little above the profile's
ACCEPT_SPECIALIZED = "or accept a specialized kernel with submit_kernel(require_generality=false)"


def _sizes(sizes: dict[str, int] | str) -> str:
    return sizes if isinstance(sizes, str) else ",".join(f"{k}={v}" for k, v in sizes.items())


def no_vendor_reason(name: str, facts: Any) -> str:
    """Why a problem has no vendor yardstick, and what stands in for it on this device: the roofline where the
    device's peak and bandwidth are known, its memory term where only the bandwidth is, else nothing (lavapipe)."""
    peak, bandwidth = getattr(facts, "peak_tflops", None), getattr(facts, "memory_bandwidth_gbps", None)
    if peak and bandwidth:
        return (f"{name} names no vendor library; % of the roofline (flops at the device's peak, bytes at its "
                "bandwidth) is the yardstick")
    if bandwidth:
        return (f"{name} names no vendor library; the memory roofline (bytes at the device's {bandwidth:g} GB/s; "
                "no FLOP peak is known for it) is the yardstick")
    return (f"{name} names no vendor library and this device has no known peak or bandwidth: there is no "
            "yardstick here, compare versions with each other")


def named_sizes(text: str) -> dict[str, int]:
    """The sizes a worker's progress line names ("M=4101 N=33 K=19: validate trial 1/1")."""
    return {name: int(value) for name, value in re.findall(r"(\w+)=(\d+)", text.split(":")[0])}


def above_session(problem: Problem, session_sizes: dict[str, int], sizes: dict[str, int] | str) -> bool:
    """A sampled size with more work than the session's: a timeout there may be a kernel that is only slow (one
    launch longer than the job's limit), so it makes the version not general rather than failed."""
    named = named_sizes(sizes) if isinstance(sizes, str) else sizes
    try:
        return set(named) == set(session_sizes) and problem.work(named) > problem.work(session_sizes)
    except (KeyError, TypeError, ValueError):
        return False


def not_general_message(outcome: Outcome, generality: Generality, symbols: Sequence[str] = ("M", "N", "K"),
                        bound_declarable: bool = False) -> str:
    """What a version right at the session's sizes and wrong at others says: not a success, where it failed first
    (with the check's numbers), where else, and what would make it one. Wrong results lead; sizes where the job
    ran past its limit follow, as secondary, when any size gave a wrong result (the hang may be the machine's, the
    wrong result is the kernel's)."""
    wrong = [f for f in generality.failures if f.check != "timeout"]
    hung = [f for f in generality.failures if f.check == "timeout"]
    first, *rest = wrong or hung
    finished = len(generality.sizes_checked) or len(generality.failures)
    # a size that timed out finished no check: it counts among the sizes reached, not those checked
    launch_only = bool(wrong) and all(f.check == LAUNCH_LIMIT for f in wrong)
    where = ("its launch line cannot run at the largest sizes the problem allows (evaluated there, not run)"
             if launch_only else f"wrong at {len(wrong)} of {finished} sampled other sizes" if wrong else
             f"did not finish at {len(hung)} of {len(generality.sizes_checked) + len(hung)} sampled other sizes")
    timing = outcome.timing
    here = f" (median {timing.median_ms:.4g} ms, {speed(timing.tflops, timing.gbps) or 'n/a'})" if timing else ""
    text = (f"not general: right at the session's sizes{here} but {where}, so not a success. First at "
            f"{_sizes(first.sizes)}: {first.check}: {(first.message or '').strip().rstrip('.')}")
    if rest:
        text += ". Also at " + "; ".join(f"{_sizes(f.sizes)} ({f.check})" for f in rest[:4])
        text += f" and {len(rest) - 4} more" if len(rest) > 4 else ""
    if wrong and hung:
        text += (f". Secondary: at {', '.join(_sizes(f.sizes) for f in hung)} the check ran past the job's time "
                 "limit (timeout) and was stopped, at more work than the session's; fix the wrong results first, "
                 "then see whether it still times out there")
    allowed = f"every size meeting the session's constraints {generality.constraints}" if generality.constraints \
        else "any size (the session declares no constraints)"
    if all(f.check == LAUNCH_LIMIT for f in wrong or hung):  # nothing ran wrong: the launch line is the fix
        text += f". A kernel must launch at {allowed}, {ACCEPT_SPECIALIZED}."
    else:
        text += (f". A kernel must be right at {allowed}: handle the edges (guard loads and stores past "
                 f"{', '.join(symbols)}), {ACCEPT_SPECIALIZED}.")
    if bound_declarable and wrong and all(f.check == "wrong_result" for f in wrong):
        text += (" Every failure is a wrong value (none unwritten or out of bounds): if the kernel is right and only "
                 "its rounding differs, the problem file's bound may be too tight for its reductions; it can declare "
                 "REDUCTION (the longest sum's length) or error_scale (docs/problems.md, Tolerance).")
    return text


def also_wrong(generality: Generality, besides: SizeFailure | None = None) -> str:
    """A short clause for a version failed by another finding (the sanitizer's, or a crash at one sampled size:
    `besides`) that is also wrong at other sampled sizes, so the message does not point at one fault only: "; also
    wrong at 10 of 11 sampled sizes: out_of_bounds_write first at M=1,N=1,K=1". Timeouts are not wrong results.
    Empty when generality passed or was not checked."""
    if generality.passed is not False:
        return ""
    wrong = [f for f in generality.failures if f is not besides and f.check != "timeout"]
    if not wrong:
        return ""
    where = f"{len(wrong)} of {len(generality.sizes_checked) or len(generality.failures)}"
    why = clipped((wrong[0].message or "").strip().rstrip("."), ALSO_WRONG_CHARS)
    return (f"; also wrong at {where} sampled sizes: {wrong[0].check} first at {_sizes(wrong[0].sizes)}"
            + (f" ({why})" if why else ""))


ALSO_WRONG_CHARS = 300  # the first other size's own message, cut: the main finding leads the answer


def impossible_speed(problem: Problem, dtype: str, sizes: dict[str, int], device: Device,
                     median_ms: float) -> str | None:
    """Why `median_ms` is faster than any correct kernel can be on this device, or None: the flops at the fastest
    rate the problem's work can run at, or the bytes that must cross memory at its bandwidth (less what its last
    level cache could hold), whichever takes longer (Problem.speed_floor_ms)."""
    cache = (device.l2_mb or 0.0) * 2**20
    floor = problem.speed_floor_ms(sizes, dtype, device.peak_tflops, device.memory_bandwidth_gbps, cache)
    if not floor or median_ms * IMPOSSIBLE_SPEED_MARGIN >= floor:
        return None
    limit = problem.speed_limit(dtype, device.peak_tflops)
    flops_ms = problem.flops(sizes) / (limit * 1e12) * 1e3 if limit else 0.0
    if flops_ms >= floor:
        why = (f"measured {problem.flops(sizes) / (median_ms * 1e-3) / 1e12:.1f} TFLOP/s, above the {limit:.1f} "
               f"TFLOP/s this device can reach for {dtype}")
    else:
        moved = problem.min_bytes(sizes, dtype) - cache
        why = (f"measured {median_ms:.4g} ms, less than the {floor:.4g} ms it takes to move the "
               f"{moved / 1e6:.4g} MB that cannot sit in its {device.l2_mb:g} MB cache at its "
               f"{device.memory_bandwidth_gbps:g} GB/s")
    return (f"{why}: the kernel cannot have done all of the work in the time measured (skipped work, or work done "
            "outside the timed launch)")


LOOP_GUARD_SIZE = 16384  # a size at which one thread's loops may pass llvmpipe's ~65535 iterations


def loop_caveat(verdict: Verdict, device: Device, sizes: dict[str, int]) -> str:
    """On a device that ends long loops early (llvmpipe), what an unwritten or wrong output may owe to it: said only
    where a size is large enough for one thread to loop that long."""
    guard = next((c for c in device.prop("caveats") or [] if "65535" in c), None)
    if guard is None or verdict.check not in ("unwritten_output", "wrong_result", "nan_or_inf") or \
            max(sizes.values(), default=0) < LOOP_GUARD_SIZE:
        return ""
    return (f"\nOn this device: {guard}. If each thread loops long at these sizes, check at smaller ones before "
            "blaming the kernel")


def judge(result: EvaluateResult, *, problem: Problem, backend: str, dtype: str, sizes: dict[str, int],
          device: Device, runs: bool) -> Outcome:
    """The outcome of one worker result: the first failing check, in order of blame."""
    compiled = result.compile
    if compiled is None or not compiled.ok:
        return Outcome(status=Status.COMPILE_ERROR, failure=(compiled and compiled.reason) or "compile",
                       compile=compiled, message=compile_failure(compiled.log if compiled else None))
    if not runs:
        return Outcome(status=Status.COMPILED, failure=None, compile=compiled,
                       message=f"compiled for {compiled.resources.get('arch')}; no {backend} device on "
                               "this machine, so it was not validated or timed")
    verdict = result.validation or Verdict(passed=False, message="the worker returned no validation")
    failed = Outcome(status=Status.FAILED, compile=compiled, validation=verdict)
    if not verdict.passed:
        # A kernel written for another dtype is a common cause of NaN or garbage; restate the ABI.
        abi = problem.abi(backend, dtype).splitlines()[1]
        return failed.model_copy(update={
            "failure": verdict.check, "message": f"validation failed ({verdict.check}): {verdict.message}\n"
                                                 f"This session's ABI ({dtype}): {abi}"
                                                 + loop_caveat(verdict, device, sizes)})
    timing = result.timing
    if timing and not (timing.recheck and timing.recheck.passed):
        recheck = timing.recheck or Recheck(passed=False)
        return failed.model_copy(update={
            "failure": f"recheck_{recheck.check}",
            "message": f"the output of the timed launches was wrong ({recheck.check}): {recheck.message}"})
    again = result.revalidation
    if again and not again.passed:
        return failed.model_copy(update={
            "failure": f"revalidation_{again.check}", "timing": timing,
            "message": f"faster than the vendor library, so validated again on fresh inputs, and that failed "
                       f"({again.check}): {again.message}"})
    if timing and timing.median_ms:
        why = impossible_speed(problem, dtype, sizes, device, timing.median_ms)
        if why:
            return failed.model_copy(update={"failure": "impossible_speed", "timing": timing, "message": why})
    message = verdict.message or "passed"
    if timing:
        message += f"; median {timing.median_ms:.4g} ms ({speed(timing.tflops, timing.gbps) or 'n/a'})"
    return Outcome(status=Status.BENCHMARKED if timing else Status.VALIDATED, failure=None, compile=compiled,
                   validation=verdict, timing=timing, message=message)
